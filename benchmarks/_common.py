"""What every benchmark script shares: summary statistics and the one JSON line it prints.

The scripts are run as `python benchmarks/<name>.py`, so this directory is on `sys.path`
and `import _common` works without packaging the benchmarks. Importing it also puts the
repository root on `sys.path`: the GitLab sandbox and the other test-only helpers the
benchmarks share with the tests live in `tests/support/`, outside the installed package.
"""

from __future__ import annotations

import asyncio
import json
import math
import multiprocessing
import os
import platform
import statistics
import sys
import threading
from collections.abc import Callable, Sequence
from multiprocessing.connection import Connection
from multiprocessing.process import BaseProcess
from pathlib import Path
from typing import Any

REPOSITORY_ROOT = str(Path(__file__).resolve().parent.parent)
if REPOSITORY_ROOT not in sys.path:
    sys.path.insert(1, REPOSITORY_ROOT)

from coding_agent.domain.tasks import Forge, TaskKey, TaskKind
from coding_agent.sandbox.github import GitHubState
from tests.support.gitlab import GitLabState

__all__ = [
    "summary_ms",
    "percentile",
    "emit",
    "seed_github",
    "seed_gitlab",
    "open_labelled_issues",
    "ServerProcess",
    "TRIGGER_LABEL",
    "proc_stat_fields",
    "write_rabbitmq_config",
    "queue_all",
]

TRIGGER_LABEL = "coding agent"


def percentile(values: Sequence[float], fraction: float) -> float:
    """Nearest-rank percentile: an observed value, never an interpolated one."""
    if not values:
        raise ValueError("no values to summarise")
    ordered = sorted(values)
    rank = max(1, math.ceil(fraction * len(ordered)))
    return ordered[rank - 1]


def proc_stat_fields(pid: int | str) -> list[str] | None:
    """/proc/`pid`/stat after the command name (field 3 onwards); None once it is gone.
    utime, stime, cutime and cstime, fields 14-17, are items 11-14."""
    try:
        with open(f"/proc/{pid}/stat", encoding="utf-8", errors="replace") as handle:
            return handle.read().rsplit(")", 1)[1].split()
    except OSError:
        return None


def summary_ms(seconds: Sequence[float]) -> dict[str, float | int]:
    """Median, p95, min and max in milliseconds (3 decimals) of durations in seconds."""
    return {
        "n": len(seconds),
        "median_ms": round(statistics.median(seconds) * 1000, 3),
        "p95_ms": round(percentile(seconds, 0.95) * 1000, 3),
        "min_ms": round(min(seconds) * 1000, 3),
        "max_ms": round(max(seconds) * 1000, 3),
    }


def _cpu_ticks() -> tuple[int, int] | None:
    """(steal, all) ticks of every CPU so far, from /proc/stat (None without one)."""
    try:
        with open("/proc/stat", encoding="ascii") as handle:
            fields = handle.readline().split()[1:9]  # user nice system idle iowait irq softirq steal
    except OSError:
        return None
    values = [int(value) for value in fields]
    return (values[7], sum(values)) if len(values) == 8 else None


_TICKS_AT_START = _cpu_ticks()  # when the benchmark imported this module


def _steal_percent() -> float | None:
    """The share of the CPUs' time the hypervisor gave to other guests since the start."""
    now = _cpu_ticks()
    if now is None or _TICKS_AT_START is None or now[1] == _TICKS_AT_START[1]:
        return None
    return round(100 * (now[0] - _TICKS_AT_START[0]) / (now[1] - _TICKS_AT_START[1]), 1)


def emit(result: dict[str, Any]) -> None:
    """Print the benchmark's one JSON object, with the machine it ran on."""
    machine = {
        "python": platform.python_version(),
        "platform": platform.platform(),
        "cpus": os.cpu_count(),
        # Figures taken on a busy machine are not comparable: say how busy it was, and
        # (on a virtual machine) how much of its CPUs' time went to other guests.
        "load_average_1_5_15_min": [round(load, 2) for load in os.getloadavg()],
        "cpu_steal_percent": _steal_percent(),
    }
    result = {**result, "machine": machine}
    json.dump(result, sys.stdout, indent=2)
    sys.stdout.write("\n")


def seed_github(state: GitHubState, repos: Sequence[str], maintainer: str, bot: str, bot_token: str) -> None:
    """Repositories where `maintainer` is admin and the bot (authenticated by `bot_token`) may write."""
    state.add_user(maintainer)
    state.add_user(bot, token=bot_token, bot=True)
    for repo in repos:
        state.add_repo(repo)
        state.set_permission(repo, maintainer, "admin")
        state.set_permission(repo, bot, "write")


def seed_gitlab(state: GitLabState, projects: Sequence[str], maintainer: str, bot: str, bot_token: str) -> None:
    """GitLab's twin of `seed_github`: Maintainer (40) and Developer (30) access."""
    state.add_user(maintainer)
    state.add_user(bot, token=bot_token, bot=True)
    for project in projects:
        state.add_project(project)
        state.set_access(project, maintainer, 40)
        state.set_access(project, bot, 30)


def open_labelled_issues(
    state: GitHubState | GitLabState, forge: Forge, projects: Sequence[str], count: int, author: str, title: str = "Task"
) -> list[TaskKey]:
    """`count` issues spread over `projects`, each given the trigger label by `author`."""
    keys = []
    for index in range(count):
        project = projects[index % len(projects)]
        number = state.create_issue(project, f"{title} {index}", "Please do it.", author=author)
        state.add_label(project, number, TRIGGER_LABEL, actor=author)
        keys.append(TaskKey(forge, project, TaskKind.ISSUE, number))
    return keys


class ServerProcess:
    """The sandbox servers a benchmark talks to, in a child process (or, `in_process`, a
    thread of this one).

    In real use the forge and the model are remote; in the measured process their server
    threads would compete with the host for the GIL and show up as its overhead or its
    event loop's lag. `serve(conn)`, a module-level function (the child is spawned),
    starts the servers, sends one first message (their URLs, as a dict), then answers
    each message it receives until `("stop",)`.
    """

    def __init__(self, serve: Callable[[Connection], None], in_process: bool = False) -> None:
        self._conn, child_conn = multiprocessing.Pipe()
        self._runner: threading.Thread | BaseProcess
        if in_process:
            self._runner = threading.Thread(target=serve, args=(child_conn,), daemon=True)
        else:
            context = multiprocessing.get_context("spawn")
            self._runner = context.Process(target=serve, args=(child_conn,), daemon=True)
        self._lock = threading.Lock()
        self.urls: dict[str, str] = {}

    @property
    def pid(self) -> int | None:
        """The child's process id (None in process): what a CPU count of the host leaves out."""
        return self._runner.pid if isinstance(self._runner, BaseProcess) else None

    def __enter__(self) -> ServerProcess:
        self._runner.start()
        try:
            if not self._conn.poll(60):
                raise SystemExit("the sandbox servers did not start within 60 s")
            self.urls = self._conn.recv()
        except EOFError:
            raise SystemExit("the sandbox servers' process ended before it started them") from None
        return self

    def __exit__(self, *exc_info: object) -> None:
        with self._lock:
            self._conn.send(("stop",))
        self._runner.join(timeout=30)

    def ask(self, *message: Any) -> Any:
        """Send `message`, return the answer (one question at a time)."""
        with self._lock:
            self._conn.send(message)
            return self._conn.recv()

    async def ask_async(self, *message: Any) -> Any:
        """`ask` from an event loop, the wait in a thread (the loop goes on meanwhile)."""
        return await asyncio.to_thread(self.ask, *message)


def write_rabbitmq_config(
    directory: Path, github: dict[str, Any], openai_base_url: str, database: str, queue: str, workers: int, **sections: Any
) -> Path:
    """The config of a benchmark's worker processes on RabbitMQ and `database`, written to
    `directory/config.yaml`: `github` is its section, `sections` replace or add top-level
    ones (e.g. `scheduling`)."""
    import yaml

    from tests.support.services import amqp_url

    data: dict[str, Any] = {
        "task_source": ["github"],
        "github": github,
        "llm": {"provider": "openai", "openai": {"model": "replay", "base_url": openai_base_url, "api_key": "k"}},
        "workspace": {"base_dir": str(directory / "workspaces")},
        "context_storage": {"base_dir": str(directory / "contexts")},
        "database": {"url": database},
        "queue": {"backend": "rabbitmq", "url": amqp_url(), "name": queue},
        "workers": workers,
        "logging": {"dir": str(directory / "logs")},
        "memory": {"enabled": False},
        "retry": {"base_delay_seconds": 0.01},
        "dashboard": {"enabled": False},
        **sections,
    }
    path = directory / "config.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


async def queue_all(config_path: Path) -> int:
    """One producer cycle in this process: every labelled task onto the queue; how many."""
    from coding_agent.config import load_config
    from coding_agent.runtime.service import AgentService

    service = AgentService(load_config(config_path, env={}))
    try:
        return len((await service.producer.cycle(await service.queue())).enqueued)
    finally:
        await service.aclose()

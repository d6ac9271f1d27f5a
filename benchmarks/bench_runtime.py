"""Concurrency of the runtime (SPEC 13): N tasks at once vs one, the event loop's lag
while they run, and how soon a task labelled while another runs is picked up.

1. `run --once` (`AgentService.run_cycle`, memory queue) on 1 and on N issues of the
   sandbox GitHub, `workers: N`, against the replay model with a fixed latency per reply
   (5 replies: 4 tool calls, then done). Target: N=16 under 1.15x the time of one.
2. Event-loop lag while the N tasks run: a sampler sleeps 10 ms again and again and
   records how late it wakes. Target: p99 under 50 ms.
3. Pickup while busy: `serve` with two slots and a poll interval; a long task runs, a
   second is labelled; the time from the label to the second task's first model
   request. Target: under one poll interval + 1 s.
4. CPU-seconds per task until every task's first model request (this process, its
   live descendants and its reaped children; less sensitive to other load than wall
   time): what a task pays before it starts working. Budget: about 0.1 CPU-s.

Run: `python benchmarks/bench_runtime.py [--tasks 16] [--latency 1.0] [--no-mirror]`
(`--no-mirror`: `workspace.mirror: false`, every run cloning from the forge)
"""

from __future__ import annotations

import argparse
import asyncio
import os
import tempfile
import time
from pathlib import Path
from typing import Any

from _common import emit, percentile

from coding_agent.config import AgentConfig, parse_config
from coding_agent.runtime.service import AgentService
from coding_agent.testing.github import GitHubSandbox
from coding_agent.testing.replay_model import ReplaySandbox

REPO = "bench/runtime"
BOT = "bench-bot"
TOKEN = "ghp_" + "BenchRuntimeToken0123456789abcdef"
MIRROR = True


def _script(latency: float) -> dict[str, Any]:
    steps: list[dict[str, Any]] = [
        {"tool": "workspace/create", "args": {"path": f"f{n}.txt", "content": f"{n}\n"}, "comment": f"f{n}"} for n in range(4)
    ]
    return {"latency_seconds": latency, "replies": [*steps, {"done": "Wrote the files."}]}


def _sandbox() -> GitHubSandbox:
    sandbox = GitHubSandbox().start()
    state = sandbox.state
    state.add_user("maintainer")
    state.add_user(BOT, token=TOKEN, bot=True)
    state.add_repo(REPO)
    state.set_permission(REPO, "maintainer", "admin")
    state.set_permission(REPO, BOT, "write")
    return sandbox


def _config(directory: Path, sandbox: GitHubSandbox, model: ReplaySandbox, **extra: Any) -> AgentConfig:
    data: dict[str, Any] = {
        "task_source": ["github"],
        "github": {"api_url": sandbox.url, "token": TOKEN, "owner": "bench", "bot_name": BOT},
        "llm": {"provider": "openai", "openai": {"model": "replay", "base_url": model.openai_base_url, "api_key": "k"}},
        "workspace": {"base_dir": str(directory / "workspaces"), "mirror": MIRROR},
        "context_storage": {"base_dir": str(directory / "contexts")},
        "database": {"url": f"sqlite:///{directory / 'state.db'}"},
        "logging": {"dir": str(directory / "logs")},
        "memory": {"enabled": False},
        "progress_comment": {"enabled": False},
        "retry": {"base_delay_seconds": 0.01},
        "dashboard": {"enabled": False},
        **extra,
    }
    return parse_config(data, env={})


async def _lag_sampler(samples: list[float], stop: asyncio.Event) -> None:
    loop = asyncio.get_running_loop()
    while not stop.is_set():
        before = loop.time()
        await asyncio.sleep(0.01)
        samples.append(loop.time() - before - 0.01)


def _tree_cpu_seconds() -> float:
    """CPU time of this process, its live descendants and the children it reaped."""
    tick = os.sysconf("SC_CLK_TCK")
    stats: dict[int, list[str]] = {}
    for entry in os.scandir("/proc"):
        if entry.name.isdigit():
            try:
                with open(f"/proc/{entry.name}/stat", encoding="utf-8", errors="replace") as handle:
                    stats[int(entry.name)] = handle.read().rsplit(")", 1)[1].split()
            except OSError:
                continue
    me = os.getpid()
    tree, changed = {me}, True
    while changed:
        found = {pid for pid, fields in stats.items() if int(fields[1]) in tree} - tree
        tree |= found
        changed = bool(found)
    total = 0
    for pid in tree & set(stats):
        fields = stats[pid]  # utime, stime, cutime, cstime are fields 14-17
        total += sum(int(value) for value in fields[11:15]) if pid == me else int(fields[11]) + int(fields[12])
    return total / tick


async def _first_requests_cpu(model: ReplaySandbox, tasks: int, started_cpu: float) -> float:
    """CPU-seconds per task spent until every task has sent its first model request."""
    while len({r.conversation for r in model.requests}) < tasks:
        await asyncio.sleep(0.01)
    return (_tree_cpu_seconds() - started_cpu) / tasks


async def _once(tasks: int, latency: float) -> tuple[float, list[float], float]:
    with tempfile.TemporaryDirectory() as scratch:
        sandbox = _sandbox()
        try:
            for n in range(tasks):
                number = sandbox.state.create_issue(REPO, f"Task {n}", "Write the files.", author="maintainer")
                sandbox.state.add_label(REPO, number, "coding agent", actor="maintainer")
            with ReplaySandbox(_script(latency)) as model:
                service = AgentService(_config(Path(scratch), sandbox, model, workers=tasks))
                samples: list[float] = []
                stop = asyncio.Event()
                sampler = asyncio.create_task(_lag_sampler(samples, stop))
                first = asyncio.create_task(_first_requests_cpu(model, tasks, _tree_cpu_seconds()))
                started = time.perf_counter()
                report = await service.run_cycle()
                elapsed = time.perf_counter() - started
                stop.set()
                await sampler
                await service.aclose()
            assert [r.status for r in report.results] == ["done"] * tasks, report
            return elapsed, samples, await first
        finally:
            sandbox.stop()


async def _pickup(latency: float, interval: float) -> float:
    with tempfile.TemporaryDirectory() as scratch:
        sandbox = _sandbox()
        try:
            state = sandbox.state
            long = state.create_issue(REPO, "Long", "Write the files.", author="maintainer")
            state.add_label(REPO, long, "coding agent", actor="maintainer")
            with ReplaySandbox(_script(latency)) as model:
                config = _config(Path(scratch), sandbox, model, workers=2, scheduling={"interval_seconds": interval})
                service = AgentService(config)
                stop = asyncio.Event()
                serving = asyncio.create_task(service.serve(stop))
                while not model.requests:
                    await asyncio.sleep(0.01)
                labelled = time.perf_counter()
                second = state.create_issue(REPO, "Second", "Write the files.", author="maintainer")
                state.add_label(REPO, second, "coding agent", actor="maintainer")
                while len({r.conversation for r in model.requests}) < 2:
                    await asyncio.sleep(0.01)
                picked = time.perf_counter() - labelled
                stop.set()
                await serving
                await service.aclose()
            return picked
        finally:
            sandbox.stop()


async def main(tasks: int, latency: float, interval: float) -> dict[str, Any]:
    one, _, one_cpu = await _once(1, latency)
    many, lag, many_cpu = await _once(tasks, latency)
    pickup = await _pickup(latency * 4, interval)
    return {
        "benchmark": "runtime",
        "reply_latency_s": latency,
        "workspace_mirror": MIRROR,
        "one_task_s": round(one, 3),
        f"{tasks}_tasks_s": round(many, 3),
        "ratio": round(many / one, 3),
        "ratio_target": 1.15,
        "event_loop_lag_ms": {
            "p50": round(percentile(lag, 0.5) * 1000, 2),
            "p99": round(percentile(lag, 0.99) * 1000, 2),
            "max": round(max(lag) * 1000, 2),
            "target_p99": 50,
        },
        "pickup_while_busy_s": round(pickup, 3),
        "pickup_target_s": interval + 1,
        "cpu_s_per_task_before_first_request": {"one_task": round(one_cpu, 3), f"{tasks}_tasks": round(many_cpu, 3)},
    }


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--tasks", type=int, default=16)
    parser.add_argument("--latency", type=float, default=1.0)
    parser.add_argument("--interval", type=float, default=2.0)
    parser.add_argument("--no-mirror", action="store_true", help="workspace.mirror: false")
    options = parser.parse_args()
    MIRROR = not options.no_mirror
    emit(asyncio.run(main(options.tasks, options.latency, options.interval)))

"""Memory over a long `serve` (a soak): the resident set of one `coding-agent serve`
process after every `--every` tasks, over `--tasks` tasks (default 2,000).

`serve` runs as a deployment runs it (`coding-agent serve --config FILE`, a process of
its own: SQLite, `workers: 4`, webhooks and the dashboard on, polling every 30 s). The
sandbox GitHub and the fast replay model (no latency; two tool steps, done, the memory
reply) run in this process, so their own growth (every issue, comment and branch the
forge keeps) is not measured. The sandbox gzips its answers, as api.github.com does:
the answer cache keeps bodies as received, and sent uncompressed, the pages of the bot's
open PRs (every PR stays open here) weighed about 25 times as much in it. Tasks arrive
in waves of `--wave`: the issues are opened and labelled, the label's signed webhook
is POSTed to `serve`, and the next wave comes when the state store shows the wave's
runs done; after each wave one task's dashboard page is fetched. At every `--every`
tasks, the sample, taken at rest: once the wave's runs are done, `serve` has used no CPU
for half a second (its worker has released the last run's queue entry and given the
free pages back, `runtime/native_memory.py`), and before that wave's dashboard look:
`VmRSS` of `serve`, its open file descriptors, threads and child processes.

Target: after the first 200 tasks (the warm-up: imports, caches filled, the allocator's
arenas), RSS grows under 10 MB in all, however many tasks follow: no sample after the
warm-up's is 10 MB or more above it (`rss_highest_above_warm_up_mb`; the growth to the
last sample is reported too). Also checked: every task done exactly once, one final
comment each, no ERROR or WARNING line in the logs. `serve` starts afresh (same pid)
every `scheduling.restart_after_runs` runs, as deployed (`fresh_starts` counts them);
`--restart-after-runs 0` soaks one image throughout.

`--heap` runs `serve` through `_soak_trace.py` (a wrapper in this directory: nothing in
the package changes), which adds to each sample from `--trace-from` tasks on where the
memory is (glibc's heap, SQLite's page caches, the objects the garbage collector tracks),
and reports the types of object that grew in number. `--trace` also starts tracemalloc
at `--trace-from` and reports what was allocated after it and is still alive at the last
sample (by stack), and what of it grew between the last two samples. Traced, `serve` is
several times slower and bigger: its RSS figures are not comparable with untraced ones.

Run: `python benchmarks/bench_soak.py [--tasks 2000] [--wave 10] [--every 100] [--workers 4] [--heap] [--trace] [--trace-from 200] [--restart-after-runs N]`
"""

from __future__ import annotations

import argparse
import json
import os
import pickle
import re
import signal
import socket
import subprocess
import sys
import tempfile
import time
import tracemalloc
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any
from urllib.parse import quote

import httpx
import yaml
from _common import TRIGGER_LABEL, emit, proc_stat_fields, seed_github

from coding_agent.sandbox.github import GitHubSandbox
from coding_agent.sandbox.replay_model import ReplaySandbox
from coding_agent.store.state import StateStore
from tests.support.github_webhooks import GitHubWebhooks
from tests.support.waiting import wait_for

REPO = "bench/soak"
BOT = "bench-bot"
MAINTAINER = "maintainer"
TOKEN = "ghp_" + "BenchSoakToken0123456789abcdefgh"
WEBHOOK_SECRET = "whsec-" + "soak0123456789abcdefghij"
WARM_UP_TASKS = 200
TARGET_MB = 10.0
WAVE_TIMEOUT_S = 600.0
STARTUP_TIMEOUT_S = 600.0  # tracemalloc makes the imports slow
TRACER = Path(__file__).with_name("_soak_trace.py")
REST_S = 0.5  # no CPU used this long: the sample is of a process at rest
REST_DEADLINE_S = 20.0

SCRIPT: dict[str, Any] = {
    "replies": [
        {"tool": "workspace/create", "args": {"path": "notes.txt", "content": "a\n"}, "comment": "Notes."},
        {"tool": "workspace/create", "args": {"path": "more.txt", "content": "b\n"}, "comment": "More."},
        {"done": "Wrote the notes."},
        {"text": '{"long_term_memory": "Notes go in notes.txt.", "thread_memory": "Wrote the notes."}'},
    ]
}


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def _write_config(
    directory: Path, forge_url: str, model_url: str, workers: int, port: int, restart_after_runs: int | None
) -> Path:
    data: dict[str, Any] = {
        "task_source": ["github"],
        "github": {"api_url": forge_url, "token": TOKEN, "owner": "bench", "bot_name": BOT},
        "llm": {"provider": "openai", "openai": {"model": "replay", "base_url": model_url, "api_key": "k"}},
        "workspace": {"base_dir": str(directory / "workspaces")},
        "context_storage": {"base_dir": str(directory / "contexts")},
        "database": {"url": f"sqlite:///{directory / 'state.db'}"},
        "workers": workers,
        "logging": {"dir": str(directory / "logs")},
        "scheduling": {
            "interval_seconds": 30,
            **({"restart_after_runs": restart_after_runs} if restart_after_runs is not None else {}),
        },
        "retry": {"base_delay_seconds": 0.01},
        "webhooks": {"github_secret": WEBHOOK_SECRET},
        "dashboard": {"enabled": True, "bind": f"127.0.0.1:{port}"},
    }
    path = directory / "config.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


# --- the serve process, seen from outside ---------------------------------------------


def _status_field(pid: int, name: str) -> int:
    with open(f"/proc/{pid}/status", encoding="ascii") as handle:
        for line in handle:
            if line.startswith(name + ":"):
                return int(line.split()[1])
    raise SystemExit(f"no {name} in /proc/{pid}/status")


def _children(pid: int) -> list[int]:
    found: list[int] = []
    for thread in os.listdir(f"/proc/{pid}/task"):
        with open(f"/proc/{pid}/task/{thread}/children", encoding="ascii") as handle:
            found.extend(int(child) for child in handle.read().split())
    return found


def _cpu_ticks(pid: int) -> int:
    """CPU time `pid` has used (user and system, every thread), in clock ticks."""
    fields = proc_stat_fields(pid)
    if fields is None:
        raise SystemExit(f"serve (pid {pid}) is gone")
    return int(fields[11]) + int(fields[12])  # utime, stime


def _wait_at_rest(pid: int) -> bool:
    """Until `serve` has used no CPU for `REST_S`: the wave's runs are done in the store a
    moment before their worker is (the queue entry released, the free pages given back),
    and a sample is of a process at rest. False when it was not at rest within
    `REST_DEADLINE_S` (a poll that lasts: the sample is taken anyway)."""
    last = {"ticks": _cpu_ticks(pid), "since": time.monotonic()}

    def at_rest() -> bool:
        ticks = _cpu_ticks(pid)
        if ticks != last["ticks"]:
            last.update(ticks=ticks, since=time.monotonic())
        return time.monotonic() - last["since"] >= REST_S

    try:
        wait_for(at_rest, REST_DEADLINE_S, "serve at rest")
    except AssertionError:
        return False
    return True


def _sample(pid: int, tasks: int, started: float) -> dict[str, Any]:
    at_rest = _wait_at_rest(pid) if tasks else True
    return {
        "tasks": tasks,
        "rss_mb": round(_status_field(pid, "VmRSS") / 1024, 1),
        "at_rest": at_rest,
        "fds": len(os.listdir(f"/proc/{pid}/fd")),
        "threads": _status_field(pid, "Threads"),
        "children": len(_children(pid)),
        "elapsed_s": round(time.monotonic() - started, 1),
    }


class Serve:
    """`coding-agent serve --config FILE` in its own process (under the tracer with `trace`)."""

    def __init__(self, config: Path, url: str, trace_dir: Path | None) -> None:
        self.url = url
        self.trace_dir = trace_dir
        self._output = (config.parent / "serve.out").open("w")
        command = [str(TRACER), str(trace_dir)] if trace_dir else ["-m", "coding_agent.cli"]
        self.process = subprocess.Popen(
            [sys.executable, *command, "serve", "--config", str(config)],
            cwd=config.parent,
            stdout=self._output,
            stderr=subprocess.STDOUT,
        )
        try:
            wait_for(self._healthy, STARTUP_TIMEOUT_S, "serve's /healthz")
        except BaseException:
            self.stop()
            raise

    def _healthy(self) -> bool:
        self.alive()
        try:
            return httpx.get(f"{self.url}/healthz", timeout=5).status_code == 200
        except httpx.HTTPError:
            return False

    def alive(self) -> None:
        if self.process.poll() is not None:
            raise SystemExit(f"serve exited ({self.process.returncode}); see its output: {self._output.name}")

    def dump_trace(self, tasks: int) -> None:
        """Have the tracer write its snapshot `tasks` (SIGUSR1), and wait for it."""
        assert self.trace_dir is not None
        done = self.trace_dir / f"{tasks}.done"
        (self.trace_dir / "next").write_text(str(tasks))
        self.process.send_signal(signal.SIGUSR1)
        wait_for(lambda: self.alive() or done.exists(), 600, f"the tracer's snapshot at {tasks} tasks")

    def stop(self) -> int:
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(120)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        self._output.close()
        return self.process.returncode


# --- the waves ------------------------------------------------------------------------


def _open_wave(sandbox: GitHubSandbox, hooks: GitHubWebhooks, url: str, size: int, first: int) -> list[int]:
    """`size` issues opened and labelled, each label's webhook delivered to `serve`."""
    numbers = []
    with httpx.Client(timeout=30) as client:
        for index in range(first, first + size):
            number = sandbox.state.create_issue(REPO, f"Soak task {index}", "Write the notes.", author=MAINTAINER)
            sandbox.state.add_label(REPO, number, TRIGGER_LABEL, actor=MAINTAINER)
            body = hooks.body(hooks.issues(REPO, number, "labeled", MAINTAINER, label=TRIGGER_LABEL))
            answer = client.post(f"{url}/webhooks/github", content=body, headers=hooks.headers("issues", body, WEBHOOK_SECRET))
            if answer.status_code != 202:
                raise SystemExit(f"the webhook for #{number} was answered {answer.status_code}")
            numbers.append(number)
    return numbers


def _wait_done(store: StateStore, serve: Serve, total: int) -> None:
    """Until the store shows `total` runs done (a run failing would never get there)."""

    def done() -> bool:
        serve.alive()
        return len(store.runs.runs_with_status("done")) >= total

    try:
        wait_for(done, WAVE_TIMEOUT_S, f"{total} runs done")
    except AssertionError:
        statuses = Counter(run.status for run in store.runs.all())
        raise SystemExit(f"{total} runs not done within {WAVE_TIMEOUT_S:.0f} s; runs by status: {dict(statuses)}") from None


def _look_at_dashboard(url: str, number: int) -> None:
    """One task's dashboard page, as an operator watching it would open it."""
    key = f"github:{REPO}#{number}"
    answer = httpx.get(f"{url}/api/tasks/{quote(key, safe='')}", timeout=30)
    if answer.status_code != 200:
        raise SystemExit(f"the dashboard answered {answer.status_code} for {key}")


def _soak(sandbox: GitHubSandbox, serve: Serve, store: StateStore, options: argparse.Namespace) -> list[dict[str, Any]]:
    hooks = GitHubWebhooks(sandbox.state, sandbox.url)
    started = time.monotonic()
    samples = [_sample(serve.process.pid, 0, started)]
    opened = 0
    while opened < options.tasks:
        size = min(options.wave, options.tasks - opened)
        numbers = _open_wave(sandbox, hooks, serve.url, size, opened)
        opened += size
        _wait_done(store, serve, opened)
        sandbox.state.clear_requests()  # the forge's own log, in this process
        if opened % options.every == 0 or opened == options.tasks:
            samples.append(_sample(serve.process.pid, opened, started))
            if serve.trace_dir is not None:
                if options.trace and opened == options.trace_from:
                    (serve.trace_dir / "start").touch()
                serve.dump_trace(opened)
                samples[-1]["heap"] = json.loads((serve.trace_dir / f"{opened}.heap").read_text())
            print(json.dumps(samples[-1]), file=sys.stderr, flush=True)
        _look_at_dashboard(serve.url, numbers[-1])
    return samples


# --- what the run must also have done ---------------------------------------------------


def _checks(sandbox: GitHubSandbox, store: StateStore, directory: Path, tasks: int) -> dict[str, Any]:
    runs = store.runs.all()
    keys = [run.task_key for run in runs]
    issues = [issue for issue in sandbox.state.issues() if not issue.is_pull]
    finals = [
        sum(1 for comment in sandbox.state.comments(REPO, issue.number) if comment.author == BOT and _is_final(comment.body))
        for issue in issues
    ]
    outputs = [*_log_files(directory), directory / "serve.out"]
    problems = [
        line.strip()
        for path in outputs
        if path.is_file()
        for line in path.read_text(errors="replace").splitlines()
        if re.search(r"\b(ERROR|WARNING|Traceback)\b", line)
    ]
    return {
        "runs_done": sum(run.status == "done" for run in runs),
        "each_task_done_once": len(keys) == len(set(keys)) == tasks and all(run.status == "done" for run in runs),
        "one_final_comment_each": finals.count(1) == tasks,
        "error_or_warning_lines": len(problems),
        **({"first_problem_lines": problems[:5]} if problems else {}),
    }


def _checks_passed(checks: dict[str, Any]) -> bool:
    return (
        checks["each_task_done_once"] is True
        and checks["one_final_comment_each"] is True
        and checks["error_or_warning_lines"] == 0
        and checks["serve_exit_code"] == 0
    )


def _is_final(body: str) -> bool:
    """The run's final comment (not its progress comment, edited in place per step)."""
    return "coding-agent progress" not in body


# --- the tracer's snapshots -------------------------------------------------------------


def _stat(stat: tracemalloc.Statistic | tracemalloc.StatisticDiff) -> dict[str, Any]:
    size = stat.size_diff if isinstance(stat, tracemalloc.StatisticDiff) else stat.size
    count = stat.count_diff if isinstance(stat, tracemalloc.StatisticDiff) else stat.count
    return {"kb": round(size / 1024, 1), "blocks": count, "where": [str(frame) for frame in stat.traceback[-6:]]}


def _trace_report(trace_dir: Path, first: int, samples: list[int]) -> dict[str, Any]:
    """The objects the garbage collector tracks that grew in number, by type, from the
    sample at `first` tasks to the last; traced (tracemalloc starts at `first`), what was
    allocated after `first` and is alive at the last sample, and what of it grew between
    the last two samples."""
    later = [tasks for tasks in samples if tasks > first]
    with (trace_dir / f"{first}.types").open("rb") as handle:
        types_before = pickle.load(handle)
    with (trace_dir / f"{later[-1]}.types").open("rb") as handle:
        types_after = pickle.load(handle)
    grown = sorted(((types_after[name] - types_before.get(name, 0), name) for name in types_after), reverse=True)
    report: dict[str, Any] = {
        "from_tasks": first,
        "to_tasks": later[-1],
        "gc_objects_grown_by_type": {name: count for count, name in grown[:25] if count > 0},
    }
    if not (trace_dir / f"{later[-1]}.snapshot").exists():
        return report
    last = tracemalloc.Snapshot.load(str(trace_dir / f"{later[-1]}.snapshot"))
    retained = last.statistics("traceback")
    report["retained_kb_per_task"] = round(sum(stat.size for stat in retained) / 1024 / (later[-1] - first), 2)
    report["retained_top"] = [_stat(stat) for stat in retained[:12]]
    if len(later) > 1:
        previous = tracemalloc.Snapshot.load(str(trace_dir / f"{later[-2]}.snapshot"))
        report["grown_between_tasks"] = [later[-2], later[-1]]
        report["grown_top"] = [_stat(stat) for stat in last.compare_to(previous, "traceback")[:12]]
    return report


@contextmanager
def _forge_and_model() -> Iterator[tuple[GitHubSandbox, ReplaySandbox]]:
    sandbox = GitHubSandbox(compress=True).start()
    try:
        seed_github(sandbox.state, [REPO], MAINTAINER, BOT, TOKEN)
        sandbox.state.set_rate_limit(limit=10**9, remaining=10**9)
        with ReplaySandbox(SCRIPT) as model:
            yield sandbox, model
    finally:
        sandbox.stop()


def _growth(samples: list[dict[str, Any]]) -> tuple[float, float] | None:
    """RSS growth (MB) from the sample at the end of the warm-up to the last one, and to the
    highest after it: the target is on the highest (a process that started afresh since
    may end lower than the warm-up's level)."""
    after = [sample["rss_mb"] for sample in samples if sample["tasks"] >= WARM_UP_TASKS]
    return (round(after[-1] - after[0], 1), round(max(after[1:]) - after[0], 1)) if len(after) > 1 else None


def _log_files(directory: Path) -> list[Path]:
    """`serve`'s log files, the compressed ones (rotated away) left out."""
    return [path for path in sorted((directory / "logs").glob("*")) if path.is_file() and path.suffix != ".gz"]


def _fresh_starts(directory: Path) -> int:
    """How often `serve` started afresh (`scheduling.restart_after_runs`), from its log."""
    return sum(
        path.read_text(errors="replace").count("starting afresh (scheduling.restart_after_runs)")
        for path in _log_files(directory)
    )


def main(options: argparse.Namespace) -> dict[str, Any]:
    if options.every % options.wave:
        raise SystemExit("--every must be a multiple of --wave (samples are taken between waves)")
    sampled = 0 < options.trace_from < options.tasks and options.trace_from % options.every == 0
    if (options.trace or options.heap) and not sampled:
        raise SystemExit("--trace-from must be a sample (a multiple of --every) before the last")
    with tempfile.TemporaryDirectory() as scratch, _forge_and_model() as (sandbox, model):
        directory = Path(scratch)
        port = _free_port()
        config = _write_config(
            directory, sandbox.url, model.openai_base_url, options.workers, port, options.restart_after_runs
        )
        trace_dir = directory / "trace" if options.trace or options.heap else None
        if trace_dir is not None:
            trace_dir.mkdir()
        serve = Serve(config, f"http://127.0.0.1:{port}", trace_dir)
        store = StateStore(f"sqlite:///{directory / 'state.db'}")
        try:
            samples = _soak(sandbox, serve, store, options)
            idle = _sample(serve.process.pid, options.tasks, 0.0)
        finally:
            exit_code = serve.stop()
        checks = {**_checks(sandbox, store, directory, options.tasks), "serve_exit_code": exit_code}
        fresh_starts = _fresh_starts(directory)
        store.close()
        traced = [sample["tasks"] for sample in samples]
        trace = _trace_report(trace_dir, options.trace_from, traced) if trace_dir is not None else None
    growth = _growth(samples)
    return {
        "benchmark": "soak",
        "tasks": options.tasks,
        "wave": options.wave,
        "workers": options.workers,
        "traced": options.trace,
        "through_the_tracer": options.trace or options.heap,
        "rss_mb_by_tasks": {sample["tasks"]: sample["rss_mb"] for sample in samples},
        "samples": samples,
        "rss_growth_after_warm_up_mb": growth[0] if growth else None,
        "rss_highest_above_warm_up_mb": growth[1] if growth else None,
        "warm_up_tasks": WARM_UP_TASKS,
        "target_mb": TARGET_MB,
        "fresh_starts": fresh_starts,
        "met": growth is not None and growth[1] < TARGET_MB and _checks_passed(checks),
        "peak": {name: max(sample[name] for sample in samples) for name in ("fds", "threads", "children")},
        "at_the_end": {name: idle[name] for name in ("fds", "threads", "children")},
        "checks": checks,
        **({"trace": trace} if trace is not None else {}),
    }


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--tasks", type=int, default=2000)
    parser.add_argument("--wave", type=int, default=10, help="tasks labelled at once")
    parser.add_argument("--every", type=int, default=100, help="sample RSS every this many tasks")
    parser.add_argument("--workers", type=int, default=4, help="`workers` of serve")
    parser.add_argument("--trace", action="store_true", help="serve under tracemalloc; report what grew")
    parser.add_argument("--heap", action="store_true", help="serve through the tracer, without tracemalloc: heap figures")
    parser.add_argument("--trace-from", type=int, default=WARM_UP_TASKS, help="the sample the growth is counted from")
    parser.add_argument(
        "--restart-after-runs", type=int, default=None, help="scheduling.restart_after_runs of serve (default: the product's)"
    )
    emit(main(parser.parse_args()))

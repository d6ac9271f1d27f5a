"""Scale of the distributed mode (SPEC 13): two `worker` processes on one RabbitMQ and
one PostgreSQL work 32 tasks in under 0.6x the time one worker process takes.

For one worker process and then for two: a fresh PostgreSQL database and a fresh
RabbitMQ queue (both removed afterwards), a fresh sandbox GitHub with `--tasks` labelled
issues, one producer cycle in this process to queue them all, then the `worker`
processes started as a deployment starts them (`coding-agent worker --config FILE`,
`workers: --slots` each) against the replay model with a fixed latency per reply
(5 replies: 4 tool calls, then done). Timed from the workers' start (their imports
included, as a deployment pays them) until the state store shows every task done;
each task must be done exactly once, and with two processes each must have done some.
Also reported: the time to the first model request (the workers' start-up) and the CPU
the worker processes and their children used (two processes share the same 2 cores,
so what is CPU-bound does not halve).

`--kill-at F` measures a takeover instead (SPEC 11.1): two worker processes, the first
SIGKILLed once a fraction F of the tasks is done, a replacement started `--replace-after`
seconds later; reported: the seconds from the kill until every task is done (each done
once), and the tasks the other worker started while the dead worker's leases were live
(`--lease`: `scheduling.lease_seconds`, default the config's).

Needs PostgreSQL at 127.0.0.1:5432 (trust) and RabbitMQ at 127.0.0.1:5672 (guest), or
`CODING_AGENT_TEST_POSTGRES` / `CODING_AGENT_TEST_AMQP`.

Run: `python benchmarks/bench_workers.py [--tasks 32] [--slots 4] [--latency 1.0]
[--kill-at 0.3 [--replace-after 10] [--lease SECONDS]]`
"""

from __future__ import annotations

import argparse
import asyncio
import os
import resource
import signal
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

from _common import emit, open_labelled_issues, queue_all, seed_github, write_rabbitmq_config

from coding_agent.sandbox.github import GitHubSandbox
from coding_agent.sandbox.replay_model import ReplaySandbox
from coding_agent.store.state import StateStore
from tests.support.services import amqp_url, delete_queues, fresh_postgres_database, postgres_admin_url, reachable

REPO = "bench/workers"
BOT = "bench-bot"
MAINTAINER = "maintainer"
TOKEN = "ghp_" + "BenchWorkersToken0123456789abcdef"
TARGET = 0.6


def _script(latency: float) -> dict[str, Any]:
    steps: list[dict[str, Any]] = [
        {"tool": "workspace/create", "args": {"path": f"f{n}.txt", "content": f"{n}\n"}, "comment": f"f{n}"} for n in range(4)
    ]
    return {"latency_seconds": latency, "replies": [*steps, {"done": "Wrote the files."}]}


def _config(
    directory: Path, forge_url: str, model: ReplaySandbox, database: str, queue: str, slots: int, lease: float | None = None
) -> Path:
    """The workers' config: no progress comment (a comment per step), `lease` when given."""
    github = {"api_url": forge_url, "token": TOKEN, "owner": "bench", "bot_name": BOT}
    sections: dict[str, Any] = {"progress_comment": {"enabled": False}}
    if lease is not None:
        sections["scheduling"] = {"lease_seconds": lease}
    return write_rabbitmq_config(directory, github, model.openai_base_url, database, queue, slots, **sections)


def _work(processes: int, tasks: int, slots: int, latency: float) -> dict[str, Any]:
    """`tasks` tasks worked by `processes` worker processes: seconds and who did what."""
    queue = f"coding-agent.bench.{uuid.uuid4().hex[:10]}"
    with tempfile.TemporaryDirectory() as scratch, fresh_postgres_database() as database:
        sandbox = GitHubSandbox().start()
        try:
            seed_github(sandbox.state, [REPO], MAINTAINER, BOT, TOKEN)
            open_labelled_issues(sandbox.state, "github", [REPO], tasks, MAINTAINER)
            with ReplaySandbox(_script(latency)) as model:
                config_path = _config(Path(scratch), sandbox.url, model, database, queue, slots)
                queued = asyncio.run(queue_all(config_path))
                assert queued == tasks, f"queued {queued} of {tasks}"
                store = StateStore(database)
                logs = [(Path(scratch) / f"worker-{n}.log").open("w") for n in range(processes)]
                cpu_before = _children_cpu()
                first_request: float | None = None
                started = time.perf_counter()
                workers = [
                    subprocess.Popen(
                        [sys.executable, "-m", "coding_agent.cli", "worker", "--config", str(config_path)],
                        cwd=scratch,
                        stdout=log,
                        stderr=subprocess.STDOUT,
                    )
                    for log in logs
                ]
                try:
                    while sum(run.status == "done" for run in store.runs.all()) < tasks:
                        if first_request is None and model.requests:
                            first_request = time.perf_counter() - started
                        dead = [worker.args for worker in workers if worker.poll() is not None]
                        assert not dead, f"a worker exited early: {dead}"
                        time.sleep(0.05)  # polling the store; the figure is seconds, this is its resolution
                    elapsed = time.perf_counter() - started
                    runs = store.runs.all()
                finally:
                    store.close()
                    for worker in workers:
                        worker.send_signal(signal.SIGTERM)
                    for worker in workers:
                        worker.wait(120)
                    for log in logs:
                        log.close()
                cpu = _children_cpu() - cpu_before
        finally:
            sandbox.stop()
            asyncio.run(delete_queues(queue))
    keys = [run.task_key for run in runs]
    assert len(keys) == len(set(keys)) == tasks and {run.status for run in runs} == {"done"}, "each task done once"
    per_process: dict[str, int] = {}
    for run in runs:
        process = run.owner.rsplit("-", 1)[0]  # host-pid of the worker process
        per_process[process] = per_process.get(process, 0) + 1
    assert len(per_process) == processes, f"each worker process did some: {per_process}"
    return {
        "seconds": round(elapsed, 3),
        "to_first_model_request_s": round(first_request or elapsed, 2),
        "worker_cpu_s": round(cpu, 1),
        "tasks_per_process": sorted(per_process.values()),
    }


def _spawn_worker(config_path: Path, log: Any) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        [sys.executable, "-m", "coding_agent.cli", "worker", "--config", str(config_path)],
        cwd=config_path.parent,
        stdout=log,
        stderr=subprocess.STDOUT,
    )


def _through_a_kill(tasks: int, slots: int, latency: float, kill_at: float, replace_after: float, lease: float | None) -> dict[str, Any]:
    """Two worker processes; the first SIGKILLed once `kill_at` of the tasks are done."""
    queue = f"coding-agent.bench.{uuid.uuid4().hex[:10]}"
    with tempfile.TemporaryDirectory() as scratch, fresh_postgres_database() as database:
        sandbox = GitHubSandbox().start()
        try:
            seed_github(sandbox.state, [REPO], MAINTAINER, BOT, TOKEN)
            open_labelled_issues(sandbox.state, "github", [REPO], tasks, MAINTAINER)
            with ReplaySandbox(_script(latency)) as model, open(Path(scratch) / "workers.log", "w") as log:
                config_path = _config(Path(scratch), sandbox.url, model, database, queue, slots, lease)
                assert asyncio.run(queue_all(config_path)) == tasks
                store = StateStore(database)
                workers = [_spawn_worker(config_path, log) for _ in range(2)]
                try:
                    _wait(lambda: sum(run.status == "done" for run in store.runs.all()) >= kill_at * tasks, workers)
                    workers[0].kill()
                    workers[0].wait(30)
                    killed = time.time()
                    victim = f"-{workers[0].pid}-"
                    leases = [store.leases.live_lease(f"github:{REPO}#{n}") for n in range(1, tasks + 1)]
                    lapse = killed + max([lease.seconds_left for lease in leases if lease and victim in lease.owner] or [0.0])
                    _wait(lambda: time.time() >= killed + replace_after, workers[1:])
                    workers.append(_spawn_worker(config_path, log))
                    _wait(lambda: sum(run.status == "done" for run in store.runs.all()) >= tasks, workers[1:])
                    elapsed = time.time() - killed
                    runs = store.runs.all()
                finally:
                    store.close()
                    for worker in workers[1:]:
                        worker.send_signal(signal.SIGTERM)
                        worker.wait(120)
        finally:
            sandbox.stop()
            asyncio.run(delete_queues(queue))
    done = sorted(run.task_key for run in runs if run.status == "done")
    assert len(done) == len(set(done)) == tasks, "each task done once"
    started_meanwhile = [run for run in runs if killed < run.started_at < lapse]
    return {
        "lease_seconds": lease or "default",
        "kill_to_all_done_s": round(elapsed, 1),
        "dead_worker_leases_ran_out_after_s": round(lapse - killed, 1),
        "runs_started_while_they_held": len(started_meanwhile),
    }


def _wait(over: Any, alive: list[subprocess.Popen[bytes]]) -> None:
    while not over():
        assert all(worker.poll() is None for worker in alive), "a worker exited early"
        time.sleep(0.05)  # polling the store; the figures are seconds, this is their resolution


def _children_cpu() -> float:
    """User + system CPU-seconds of the reaped worker processes and what they reaped (git)."""
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def main(tasks: int, slots: int, latency: float) -> dict[str, Any]:
    if not reachable(postgres_admin_url()) or not reachable(amqp_url()):
        raise SystemExit("PostgreSQL (127.0.0.1:5432) and RabbitMQ (127.0.0.1:5672) are needed")
    load_before = [round(load, 2) for load in os.getloadavg()]
    one = _work(1, tasks, slots, latency)
    two = _work(2, tasks, slots, latency)
    ratio = two["seconds"] / one["seconds"]
    return {
        "benchmark": "workers",
        "tasks": tasks,
        "slots_per_worker": slots,
        "reply_latency_s": latency,
        "one_worker": one,
        "two_workers": two,
        "ratio": round(ratio, 3),
        "ratio_target": TARGET,
        "met": ratio < TARGET,
        "load_average_at_start": load_before,
    }


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--tasks", type=int, default=32)
    parser.add_argument("--slots", type=int, default=4, help="`workers` of each worker process")
    parser.add_argument("--latency", type=float, default=1.0, help="seconds per model reply")
    parser.add_argument("--kill-at", type=float, default=None, help="SIGKILL a worker once this fraction is done")
    parser.add_argument("--replace-after", type=float, default=10.0, help="seconds until its replacement starts")
    parser.add_argument("--lease", type=float, default=None, help="scheduling.lease_seconds (default: the config's)")
    options = parser.parse_args()
    if options.kill_at is None:
        emit(main(options.tasks, options.slots, options.latency))
    else:
        figures = _through_a_kill(options.tasks, options.slots, options.latency, options.kill_at, options.replace_after, options.lease)
        emit({"benchmark": "workers-takeover", "tasks": options.tasks, "slots_per_worker": options.slots, **figures})

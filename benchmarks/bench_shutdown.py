"""A graceful shutdown in bounded time (SPEC 8.3): from SIGTERM to the exit of a `worker`
whose runs all wait on the model, and from there to another worker's first model request
for each of those tasks.

For each count of runs in flight (`--runs`, default 1 and 16): a fresh PostgreSQL
database and RabbitMQ queue, a sandbox GitHub with that many labelled issues, one
producer cycle in this process to queue them, then a `worker` process (`workers` = the
count) against the replay model, whose every answer takes `--latency` seconds (60). Once
the model has every run's first request, the worker gets SIGTERM: each run waits out
`scheduling.shutdown_grace_seconds` (`--grace`, default the config's 8), is cut, and
pauses (WIP push, comment, label, lease, its message back on the queue). A second worker
is started as soon as the first has exited; reported are the seconds from SIGTERM to the
exit, and from that exit (and from SIGTERM) until the model has the resumed request of
every task. Every resumed request must be the cut one again (the same messages).

Needs PostgreSQL at 127.0.0.1:5432 (trust) and RabbitMQ at 127.0.0.1:5672 (guest), or
`CODING_AGENT_TEST_POSTGRES` / `CODING_AGENT_TEST_AMQP`.

Run: `python benchmarks/bench_shutdown.py [--runs 1 16] [--latency 60] [--grace 8] [--logs DIR]`
"""

from __future__ import annotations

import argparse
import asyncio
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

from _common import emit, open_labelled_issues, queue_all, seed_github, write_rabbitmq_config

from coding_agent.runtime.shutdown import BACKSTOP_SECONDS, CLOSE_SECONDS, FINISH_SECONDS
from coding_agent.sandbox.github import GitHubSandbox
from coding_agent.sandbox.replay_model import ReplaySandbox
from tests.support.services import amqp_url, delete_queues, fresh_postgres_database, postgres_admin_url, reachable

REPO = "bench/shutdown"
BOT = "bench-bot"
MAINTAINER = "maintainer"
TOKEN = "ghp_" + "BenchShutdownToken0123456789abcde"


def _spawn_worker(config_path: Path, log: Any) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        [sys.executable, "-m", "coding_agent.cli", "worker", "--config", str(config_path)],
        cwd=config_path.parent,
        stdout=log,
        stderr=subprocess.STDOUT,
    )


def _wait(condition: Callable[[], bool], deadline: float, what: str) -> None:
    ends = time.monotonic() + deadline
    while not condition():
        if time.monotonic() > ends:
            raise SystemExit(f"bench_shutdown: {what} did not happen within {deadline:.0f} s")
        time.sleep(0.02)  # the figures are seconds; this is their resolution


def _case(runs: int, latency: float, grace: float | None, keep: Path | None) -> dict[str, Any]:
    queue = f"coding-agent.bench.{uuid.uuid4().hex[:10]}"
    with tempfile.TemporaryDirectory() as scratch, fresh_postgres_database() as database:
        sandbox = GitHubSandbox().start()
        try:
            seed_github(sandbox.state, [REPO], MAINTAINER, BOT, TOKEN)
            open_labelled_issues(sandbox.state, "github", [REPO], runs, MAINTAINER)
            script = {
                "latency_seconds": latency,
                "replies": [{"tool": "workspace/create", "args": {"path": "a.txt", "content": "a\n"}}, {"done": "Done."}],
            }
            with ReplaySandbox(script) as model, open(Path(scratch) / "workers.log", "w") as log:
                github = {"api_url": sandbox.url, "token": TOKEN, "owner": "bench", "bot_name": BOT}
                scheduling = {} if grace is None else {"scheduling": {"shutdown_grace_seconds": grace}}
                config_path = write_rabbitmq_config(
                    Path(scratch), github, model.openai_base_url, database, queue, runs, **scheduling
                )
                assert asyncio.run(queue_all(config_path)) == runs
                first = _spawn_worker(config_path, log)
                second: subprocess.Popen[bytes] | None = None
                try:
                    _wait(lambda: len(model.requests) >= runs, 300, "every run's first model request")
                    cut = {request.conversation: request.body.get("messages") for request in model.requests}
                    signalled = time.monotonic()
                    first.send_signal(signal.SIGTERM)
                    first.wait(120)
                    exited = time.monotonic()
                    code = first.returncode
                    second = _spawn_worker(config_path, log)
                    _wait(lambda: len(model.requests) >= 2 * runs, 300, "every task's resumed model request")
                    resumed = time.monotonic()
                    again = model.requests[runs:]
                    if keep is not None:
                        shutil.copy(Path(scratch) / "logs" / "coding-agent.log", keep / f"worker-log-{runs}.txt")
                finally:
                    for worker in (first, second):
                        if worker is not None and worker.poll() is None:
                            worker.kill()
                            worker.wait(30)
        finally:
            sandbox.stop()
            asyncio.run(delete_queues(queue))
    assert code == 0, f"the worker exited {code}"
    same = all(request.body.get("messages") == cut[request.conversation] for request in again)
    assert same and len({request.conversation for request in again}) == runs, "each cut request sent once again"
    return {
        "runs_in_flight": runs,
        "sigterm_to_exit_s": round(exited - signalled, 2),
        "exit_to_every_resumed_request_s": round(resumed - exited, 2),
        "sigterm_to_every_resumed_request_s": round(resumed - signalled, 2),
    }


def main(counts: list[int], latency: float, grace: float | None, keep: Path | None = None) -> dict[str, Any]:
    if not reachable(postgres_admin_url()) or not reachable(amqp_url()):
        raise SystemExit("PostgreSQL (127.0.0.1:5432) and RabbitMQ (127.0.0.1:5672) are needed")
    return {
        "benchmark": "shutdown",
        "model_latency_s": latency,
        "shutdown_grace_seconds": grace if grace is not None else "default (8)",
        "bound_after_grace_s": FINISH_SECONDS + CLOSE_SECONDS + BACKSTOP_SECONDS,
        "cases": [_case(runs, latency, grace, keep) for runs in counts],
    }


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, nargs="+", default=[1, 16], help="runs in flight at SIGTERM")
    parser.add_argument("--latency", type=float, default=60.0, help="seconds per model reply")
    parser.add_argument("--grace", type=float, default=None, help="scheduling.shutdown_grace_seconds")
    parser.add_argument("--logs", type=Path, default=None, help="copy each case's worker log here")
    options = parser.parse_args()
    emit(main(options.runs, options.latency, options.grace, options.logs))

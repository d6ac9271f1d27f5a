"""A graceful shutdown in bounded time (SPEC 8.3): SIGTERM while the model takes two
minutes to answer, or while a tool runs for two minutes, still pauses the run and ends
the process within `scheduling.shutdown_grace_seconds` plus a few seconds; the next
process resumes it, sending the cut request again (the same messages: no step lost, none
done twice) or telling the model its cut tool call was interrupted. Real processes
throughout: `serve` and `worker` on the sandbox forge and the replay model, a `worker`
on RabbitMQ and PostgreSQL, and a forge that stops answering as the shutdown begins."""

from __future__ import annotations

import asyncio
import os
import secrets
import signal
import subprocess
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import aio_pika

from coding_agent.runtime.queue import decode
from coding_agent.runtime.shutdown import BACKSTOP_SECONDS, CLOSE_SECONDS, FINISH_SECONDS
from coding_agent.sandbox.faults import Fault
from coding_agent.sandbox.replay_model import RecordedRequest, ReplaySandbox
from coding_agent.store.state import StateStore
from tests.support.services import amqp_url
from tests.support.state import agent_store
from tests.support.tcp_relay import TcpRelay
from tests.support.waiting import wait_for

from ._steering import distributed_config, spawn_cli, start_serve, steering_config
from .conftest import GitHubForge, load_for_service

PROCESSING, PAUSED, DONE = "coding agent processing", "coding agent paused", "coding agent done"
# The whole bound an operator's supervisor must allow past the grace.
AFTER_GRACE = FINISH_SECONDS + CLOSE_SECONDS + BACKSTOP_SECONDS
# What a loaded test machine (two cores, many processes) may add to it.
SLACK = 5.0


class SlowModel:
    """A `before` action: the model takes up to two minutes to answer this request (it
    answers at once when the test `release`s it, once the process that asked is gone)."""

    def __init__(self) -> None:
        self.entered = threading.Event()
        self._released = threading.Event()

    def __call__(self, _: dict[str, Any]) -> None:
        self.entered.set()
        self._released.wait(timeout=120)

    def release(self) -> None:
        self._released.set()


def _files_script(slow_at: int) -> dict[str, Any]:
    """Three files and done; the request for step `slow_at` (0-based) is the slow one,
    and the scripted reply after it is the same reply again, for the request sent again."""
    steps: list[dict[str, Any]] = [
        {"tool": "workspace/create", "args": {"path": f"{name}.txt", "content": f"{name}\n"}, "comment": f"Writing {name}.txt."}
        for name in "abc"
    ]
    steps.append({"done": "Wrote three files."})
    replies = [dict(step) for step in steps]
    replies.insert(slow_at + 1, dict(steps[slow_at]))
    replies[slow_at]["before"] = {"slow": {}}
    return {"replies": replies}


def _exit_within(process: subprocess.Popen[str], seconds: float) -> tuple[int, float, str]:
    """Send SIGTERM; (exit code, seconds until the exit, stderr's tail). The process is
    killed if it outlives `seconds` plus a margin (the assertion then names it)."""
    signalled = time.monotonic()
    process.send_signal(signal.SIGTERM)
    try:
        process.wait(seconds + 30)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait(30)
    took = time.monotonic() - signalled
    error = process.stderr.read()[-3000:] if process.stderr else ""
    return process.returncode, took, error


def _kill(process: subprocess.Popen[str]) -> None:
    if process.poll() is None:
        process.kill()
        process.wait(30)


def _healthz(url: str) -> int:
    try:
        with urllib.request.urlopen(f"{url}/healthz", timeout=5) as response:
            return int(response.status)
    except urllib.error.HTTPError as error:
        return error.code


def _messages(request: RecordedRequest) -> list[Any]:
    return list(request.body.get("messages", []))


def _tool_results(request: RecordedRequest) -> list[str]:
    return [str(m.get("content")) for m in _messages(request) if m.get("role") == "tool"]


def _finished(forge: GitHubForge, number: int) -> bool:
    return DONE in forge.labels("issue", number)


def test_sigterm_during_a_two_minute_model_request_pauses_within_the_grace_and_the_request_is_sent_again(
    github_forge: GitHubForge, tmp_path: Path
) -> None:
    number = github_forge.open_task("issue", "Three files", "Please write a, b and c.")
    slow = SlowModel()
    with ReplaySandbox(_files_script(1), actions={"slow": slow}) as model:
        # The default grace (8 s): what `docker stop` (10 s) leaves it.
        setup = steering_config(
            tmp_path, [github_forge], model, scheduling={"interval_seconds": 0.2}, dashboard={"bind": "127.0.0.1:0"}
        )
        first, url = start_serve(setup.config_path, tmp_path / "first.log")
        try:
            assert slow.entered.wait(timeout=120), "serve is waiting for the model's slow answer"
            assert _healthz(url) == 200
            signalled = time.monotonic()
            first.send_signal(signal.SIGTERM)
            wait_for(lambda: _healthz(url) == 503 or None, 10, "/healthz to answer 503 once the shutdown began")
            first.wait(60)
            took = time.monotonic() - signalled
        finally:
            _kill(first)
            slow.release()
        assert first.returncode == 0, (tmp_path / "first.log").read_text()[-3000:]
        assert took < 15, f"serve exited {took:.1f} s after SIGTERM"
        labels = github_forge.labels("issue", number)
        assert PAUSED in labels and PROCESSING not in labels, labels
        assert "shutting down" in github_forge.comments("issue", number)[-1][1]
        with agent_store(tmp_path) as store:
            [run] = store.runs.all(f"github:acme/widgets#{number}")
            assert run.status == "paused" and run.steps == 1, "paused before the cut request's step"
        cut = model.requests[-1]
        assert len(model.requests) == 2

        second = spawn_cli(setup.config_path, "serve")
        try:
            wait_for(lambda: _finished(github_forge, number), 120, "the resumed task to be done")
        finally:
            code, _, error = _exit_within(second, 8 + AFTER_GRACE)
        requests = model.requests

    assert code == 0, error
    assert _messages(requests[2]) == _messages(cut), "the resumed run's first request is the cut one again"
    assert len(requests) == 5, "a, b (cut), b again, c, done: no step lost or done twice"
    labels = github_forge.labels("issue", number)
    assert PAUSED not in labels and PROCESSING not in labels


def _sleeping(token: str) -> list[int]:
    """The processes whose command line holds `token` (the sandboxed `sleep 120`)."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            if token.encode() in (entry / "cmdline").read_bytes():
                found.append(int(entry.name))
        except OSError:
            continue
    return found


def test_sigterm_during_a_two_minute_tool_call_cuts_it_and_the_model_is_told_after_the_resume(
    github_forge: GitHubForge, tmp_path: Path
) -> None:
    number = github_forge.open_task("issue", "Wait a bit", "Please run the slow check, then finish.")
    token = f"shutdown-{secrets.token_hex(8)}"
    script = {
        "replies": [
            {"tool": "workspace/run", "args": {"command": f"sleep 120; echo {token}"}, "comment": "Running the check."},
            {"done": "Checked."},
        ]
    }
    with ReplaySandbox(script) as model:
        setup = steering_config(
            tmp_path, [github_forge], model, scheduling={"interval_seconds": 0.2, "shutdown_grace_seconds": 2}
        )
        first = spawn_cli(setup.config_path, "serve")
        try:
            wait_for(lambda: _sleeping(token) or None, 120, "the two-minute tool call to run")
            code, took, error = _exit_within(first, 2 + AFTER_GRACE)
        finally:
            _kill(first)
        assert code == 0, error
        assert took < 2 + AFTER_GRACE + SLACK, f"serve exited {took:.1f} s after SIGTERM"
        wait_for(lambda: not _sleeping(token), 10, "the cut tool call's processes to end")
        labels = github_forge.labels("issue", number)
        assert PAUSED in labels and PROCESSING not in labels, labels

        second = spawn_cli(setup.config_path, "serve")
        try:
            wait_for(lambda: _finished(github_forge, number), 120, "the resumed task to be done")
        finally:
            code, _, error = _exit_within(second, 2 + AFTER_GRACE)
        requests = model.requests

    assert code == 0, error
    assert len(requests) == 2, "the cut call's reply is not asked for again"
    [told] = _tool_results(requests[1])
    assert "interrupted" in told and "workspace" in told and token not in told, told


def test_a_worker_s_message_comes_back_on_sigterm_and_another_worker_finishes(
    github_forge: GitHubForge, tmp_path: Path, distributed: tuple[str, str]
) -> None:
    url, name = distributed
    number = github_forge.open_task("issue", "Three files", "Please write a, b and c.")
    slow = SlowModel()
    with ReplaySandbox(_files_script(2), actions={"slow": slow}) as model:
        setup = distributed_config(tmp_path, github_forge, model, url, name, scheduling={"shutdown_grace_seconds": 2})
        assert asyncio.run(_produce_once(setup)) == 1
        first = spawn_cli(setup.config_path, "worker")
        try:
            assert slow.entered.wait(timeout=120), "the worker waits for the model's slow answer"
            code, took, error = _exit_within(first, 2 + AFTER_GRACE)
        finally:
            _kill(first)
            slow.release()
        assert code == 0, error
        assert took < 2 + AFTER_GRACE + SLACK, f"worker exited {took:.1f} s after SIGTERM"
        assert asyncio.run(_waiting(name)) == [(f"github:acme/widgets#{number}", "continue")], "the message came back"
        cut = model.requests[-1]

        # No producer runs: only the message can bring the task to the second worker.
        second = spawn_cli(setup.config_path, "worker")
        store = StateStore(url)
        try:
            wait_for(lambda: [run.status for run in store.runs.all()] == ["done"] or None, 120, "another worker to finish")
            runs = store.runs.all()
        finally:
            store.close()
            code, _, error = _exit_within(second, 2 + AFTER_GRACE)
        requests = model.requests

    assert code == 0, error
    assert [run.status for run in runs] == ["done"], "the paused run was resumed, not started again"
    assert _messages(requests[3]) == _messages(cut)
    assert len(requests) == 5


async def _produce_once(setup: Any) -> int:
    from coding_agent.runtime.service import AgentService

    service = AgentService(load_for_service(setup))
    try:
        report = await service.producer.cycle(await service.queue())
        return len(report.enqueued)
    finally:
        await service.aclose()


async def _waiting(name: str) -> list[tuple[str, str]]:
    """The messages waiting in queue `name` (read and put back: nothing is acknowledged)."""
    connection = await aio_pika.connect(amqp_url())
    try:
        channel = await connection.channel()
        queue = await channel.declare_queue(name, passive=True)
        found = []
        while (message := await queue.get(no_ack=False, fail=False)) is not None:
            item = decode(message.body)
            found.append((item.key, item.reason))
        return found  # the channel closes unacknowledged: they go back
    finally:
        await connection.close()


def test_a_forge_that_stops_answering_during_the_shutdown_holds_no_exit_and_the_next_serve_finishes(
    github_forge: GitHubForge, tmp_path: Path
) -> None:
    number = github_forge.open_task("issue", "Three files", "Please write a, b and c.")
    slow = SlowModel()
    silent = threading.Event()
    with ReplaySandbox(_files_script(1), actions={"slow": slow}) as model:
        setup = steering_config(
            tmp_path, [github_forge], model, scheduling={"interval_seconds": 0.2, "shutdown_grace_seconds": 2}
        )
        first = spawn_cli(setup.config_path, "serve")
        try:
            assert slow.entered.wait(timeout=120), "serve is waiting for the model's slow answer"
            # From now on every forge request (API and git) waits for an answer that does not come.
            github_forge.sandbox.faults.add(Fault(pattern=".", count=10_000, status=None, hold=silent))
            code, took, error = _exit_within(first, 2 + AFTER_GRACE)
        finally:
            _kill(first)
            slow.release()
        assert code == 0, error
        assert took < 2 + AFTER_GRACE + SLACK, f"serve exited {took:.1f} s after SIGTERM"
        assert github_forge.sandbox.faults.injected >= 1, "the shutdown did ask the forge"
        with agent_store(tmp_path) as store:
            [run] = store.runs.all(f"github:acme/widgets#{number}")
            assert run.status == "paused", "the pause is saved, whatever the forge does"
        github_forge.sandbox.faults.clear()
        silent.set()

        second = spawn_cli(setup.config_path, "serve")
        try:
            wait_for(lambda: _finished(github_forge, number), 120, "the next serve to finish the task")
        finally:
            code, _, error = _exit_within(second, 2 + AFTER_GRACE)
        requests = model.requests

    assert code == 0, error
    assert _messages(requests[2]) == _messages(requests[1])
    labels = github_forge.labels("issue", number)
    assert PAUSED not in labels and PROCESSING not in labels, labels


def test_a_second_signal_during_the_grace_ends_the_process_at_once(github_forge: GitHubForge, tmp_path: Path) -> None:
    github_forge.open_task("issue", "Three files", "Please write a, b and c.")
    slow = SlowModel()
    with ReplaySandbox(_files_script(0), actions={"slow": slow}) as model:
        setup = steering_config(
            tmp_path, [github_forge], model, scheduling={"interval_seconds": 0.2, "shutdown_grace_seconds": 60}
        )
        process = spawn_cli(setup.config_path, "serve")
        try:
            assert slow.entered.wait(timeout=120), "serve is waiting for the model's slow answer"
            process.send_signal(signal.SIGTERM)
            wait_for(lambda: "shutting down" in _log(tmp_path) or None, 10, "the shutdown to begin")
            process.send_signal(signal.SIGINT)
            process.wait(10)
        finally:
            _kill(process)
            slow.release()
    assert process.returncode == 128 + signal.SIGINT


def _log(directory: Path) -> str:
    return "".join(path.read_text(errors="replace") for path in (directory / "logs").glob("*.log"))


def test_run_once_pauses_within_the_grace_and_the_next_run_once_finishes(github_forge: GitHubForge, tmp_path: Path) -> None:
    number = github_forge.open_task("issue", "Three files", "Please write a, b and c.")
    slow = SlowModel()
    with ReplaySandbox(_files_script(0), actions={"slow": slow}) as model:
        setup = steering_config(tmp_path, [github_forge], model, scheduling={"shutdown_grace_seconds": 2})
        first = spawn_cli(setup.config_path, "run", "--once")
        try:
            assert slow.entered.wait(timeout=120), "run --once is waiting for the model's slow answer"
            code, took, error = _exit_within(first, 2 + AFTER_GRACE)
        finally:
            _kill(first)
            slow.release()
        assert code == 0, error
        assert took < 2 + AFTER_GRACE + SLACK, f"run --once exited {took:.1f} s after SIGTERM"
        labels = github_forge.labels("issue", number)
        assert PAUSED in labels and PROCESSING not in labels, labels

        second = spawn_cli(setup.config_path, "run", "--once")
        assert second.wait(120) == 0, second.stderr.read() if second.stderr else ""
        requests = model.requests

    assert _finished(github_forge, number)
    assert _messages(requests[1]) == _messages(requests[0]), "the cut first request is sent again"
    assert len(requests) == 5


def test_a_broker_that_stops_answering_during_the_shutdown_holds_no_exit_and_the_message_still_comes_back(
    github_forge: GitHubForge, tmp_path: Path, distributed: tuple[str, str]
) -> None:
    """The `continue` the worker puts back never reaches the broker; the original message
    comes back once the dead connection closes, and the next worker continues the paused
    run from it instead of starting the task over."""
    url, name = distributed
    number = github_forge.open_task("issue", "Three files", "Please write a, b and c.")
    slow = SlowModel()
    with TcpRelay("127.0.0.1", 5672) as relay, ReplaySandbox(_files_script(1), actions={"slow": slow}) as model:
        grace = {"shutdown_grace_seconds": 2}
        setup = distributed_config(tmp_path, github_forge, model, url, name, scheduling=grace)
        assert asyncio.run(_produce_once(setup)) == 1
        # The first worker reaches the broker through the relay (its config, read as it starts).
        relayed = {"backend": "rabbitmq", "url": f"amqp://guest:guest@127.0.0.1:{relay.port}/", "name": name}
        steering_config(tmp_path, [github_forge], model, database={"url": url}, queue=relayed, scheduling=grace)
        first = spawn_cli(setup.config_path, "worker")
        try:
            assert slow.entered.wait(timeout=120), "the worker waits for the model's slow answer"
            relay.stall()
            code, took, error = _exit_within(first, 2 + AFTER_GRACE)
        finally:
            _kill(first)
            slow.release()
            relay.flow()
        assert code == 0, error
        assert took < 2 + AFTER_GRACE + SLACK, f"worker exited {took:.1f} s after SIGTERM"
        cut = model.requests[-1]

        distributed_config(tmp_path, github_forge, model, url, name, scheduling=grace)  # the broker itself
        second = spawn_cli(setup.config_path, "worker")
        store = StateStore(url)
        try:
            wait_for(lambda: [run.status for run in store.runs.all()] == ["done"] or None, 120, "another worker to finish")
            runs = store.runs.all()
        finally:
            store.close()
            code, _, error = _exit_within(second, 2 + AFTER_GRACE)
        requests = model.requests

    assert code == 0, error
    assert len(runs) == 1, "the paused run was continued, not a new one started"
    assert _messages(requests[2]) == _messages(cut)
    labels = github_forge.labels("issue", number)
    assert PAUSED not in labels and PROCESSING not in labels, labels

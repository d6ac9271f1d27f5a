"""Pause and resume (SPEC 8.3): by the signal file, by `coding-agent pause TASK`, and by
SIGTERM on `serve`; then resume, which continues from the next step.

"No step is redone" is read off the replay model's recorded requests: each request's
history holds one more model reply than the one before, and there are exactly as many
requests as scripted replies. A comment posted while the task is paused reaches the
model once, in the first request after the resume.
"""

from __future__ import annotations

import json
import signal
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from coding_agent.agent.steering.interrupts import REQUEST_READ_SECONDS
from coding_agent.sandbox.replay_model import RecordedRequest, ReplaySandbox

from tests.support.state import agent_store

from ._forge_git import branch_file, task_branch
from ._steering import (
    THREE_FILES,
    assistant_turns,
    new_comment_messages,
    pause_signal_action,
    post_comment,
    run_cycle,
    spawn_cli,
    steering_config,
    three_files_script,
    wait_for,
)
from .conftest import MAINTAINER, ForgeUnderTest, load_for_service, progress_comments, run_cli

KEY = "github:acme/widgets#{number}"
class Gate:
    """A `before` action that holds the model's answer until the test has acted."""

    def __init__(self) -> None:
        self.entered = threading.Event()
        self.released = threading.Event()
        self.entered_at = 0.0

    def __call__(self, _: dict[str, Any]) -> None:
        self.entered_at = time.monotonic()
        self.entered.set()
        self.released.wait(timeout=60)

    def release_after_a_request_read(self) -> None:
        """Release once the worker reads operator requests afresh (they are reused briefly)."""
        wait_for(lambda: time.monotonic() - self.entered_at > REQUEST_READ_SECONDS, 10, "a fresh request read")
        self.released.set()


def _assert_no_step_repeated(requests: list[RecordedRequest]) -> None:
    turns = [assistant_turns(request) for request in requests]
    assert turns == list(range(len(THREE_FILES))), f"each request asks for the next step once: {turns}"


def _assert_comment_reached_the_model_once(requests: list[RecordedRequest], body: str) -> None:
    expected = f"[New Comment from @{MAINTAINER}]:\n{body}"
    firsts = [index for index, request in enumerate(requests) if expected in new_comment_messages(request)]
    assert firsts, "the comment posted while paused reached the model"
    assert new_comment_messages(requests[-1]).count(expected) == 1, "exactly once in the history"


def _assert_finished_cleanly(forge: ForgeUnderTest, number: int) -> list[str]:
    labels = forge.labels("issue", number)
    assert "coding agent done" in labels
    assert not {"coding agent paused", "coding agent processing"} & set(labels)
    bodies = [body for _, body in forge.comments("issue", number)]
    [progress] = progress_comments(bodies)
    assert "✅ done" in progress and "Writing c.txt." in progress
    assert bodies[-1].startswith("Wrote three files.")
    return bodies


def _paused_state(setup_dir: Path) -> dict[str, Any]:
    [paused] = list((setup_dir / "contexts" / "paused").iterdir())
    return json.loads((paused / "task_state.json").read_text())


def test_signal_file_pauses_and_resume_continues_from_the_next_step(
    github_forge: ForgeUnderTest, tmp_path: Path
) -> None:
    number = github_forge.open_task("issue", "Three files", "Please write a, b and c.")
    signal_file = tmp_path / "contexts" / "pause_signal"
    with ReplaySandbox(three_files_script(1, "pause"), actions={"pause": pause_signal_action(tmp_path)}) as model:
        setup = steering_config(tmp_path, [github_forge], model)
        first = run_cycle(load_for_service(setup))
        assert [result.status for result in first.results] == ["paused"]
        assert "coding agent paused" in github_forge.labels("issue", number)
        assert github_forge.comments("issue", number)[-1][1].startswith("## ⏸️ Task paused")
        state = _paused_state(tmp_path)
        assert state["steps"] == 2 and state["messages"][-1]["role"] == "assistant", "paused between reply and action"
        assert state["steering"]["comments"]["last_comment_ids"], "the detection state is saved"
        assert any(setup.workspaces.iterdir()), "a paused run's clone is kept"

        assert run_cycle(load_for_service(setup)).results == (), "nothing starts while the signal file exists"
        post_comment(github_forge, "issue", number, MAINTAINER, "While you were paused: use tabs.")
        resumed = run_cli(setup, "resume")
        requests = model.requests

    assert resumed.returncode == 0, resumed.stderr
    assert "pause signal removed" in resumed.stdout and "done" in resumed.stdout
    assert not signal_file.exists()
    _assert_no_step_repeated(requests)
    _assert_comment_reached_the_model_once(requests, "While you were paused: use tabs.")
    _assert_finished_cleanly(github_forge, number)
    branch = task_branch(github_forge, number)
    assert [branch_file(github_forge, branch, name) for name in ("a.txt", "b.txt", "c.txt")] == ["a\n", "b\n", "c\n"]
    assert not any(setup.workspaces.iterdir()), "deleted once the resumed run is done"


@pytest.mark.long
def test_cli_pause_holds_until_cli_resume(github_forge: ForgeUnderTest, tmp_path: Path) -> None:
    number = github_forge.open_task("issue", "Three files", "Please write a, b and c.")
    key = KEY.format(number=number)
    gate = Gate()
    with ReplaySandbox(three_files_script(1, "gate"), actions={"gate": gate}) as model:
        setup = steering_config(tmp_path, [github_forge], model)
        worker = spawn_cli(setup.config_path, "run", "--once")
        try:
            assert gate.entered.wait(timeout=60), "the worker reached its second step"
            paused = run_cli(setup, "pause", key)
            gate.release_after_a_request_read()
            out, err = worker.communicate(timeout=60)
        finally:
            gate.released.set()
            if worker.poll() is None:
                worker.kill()
        assert paused.returncode == 0, paused.stderr
        assert worker.returncode == 0, err
        assert f"{key}: paused" in out
        assert "coding-agent resume " + key in github_forge.comments("issue", number)[-1][1]

        again = run_cli(setup, "run", "--once")
        assert again.returncode == 0 and len(model.requests) == 2, "a held pause is not resumed by a poll"
        post_comment(github_forge, "issue", number, MAINTAINER, "Paused by hand; carry on after.")
        resumed = run_cli(setup, "resume", key)
        requests = model.requests

    assert resumed.returncode == 0, resumed.stderr
    _assert_no_step_repeated(requests)
    _assert_comment_reached_the_model_once(requests, "Paused by hand; carry on after.")
    bodies = _assert_finished_cleanly(github_forge, number)
    assert sum(body.startswith("## ⏸️ Task paused") for body in bodies) == 1
    with agent_store(tmp_path) as store:
        [run] = store.runs.all(key)
        assert run.status == "done" and run.steps == len(THREE_FILES)
        assert store.steering.control_request(key) is None, "the pause request was consumed"


def test_sigterm_pauses_serve_and_a_new_serve_resumes(github_forge: ForgeUnderTest, tmp_path: Path) -> None:
    number = github_forge.open_task("issue", "Three files", "Please write a, b and c.")
    gate = Gate()
    with ReplaySandbox(three_files_script(1, "gate"), actions={"gate": gate}) as model:
        setup = steering_config(tmp_path, [github_forge], model, scheduling={"interval_seconds": 0.2})
        first = spawn_cli(setup.config_path, "serve")
        try:
            assert gate.entered.wait(timeout=60), "serve is working the task"
            first.send_signal(signal.SIGTERM)
            gate.released.set()
            first.wait(timeout=60)
        finally:
            gate.released.set()
            if first.poll() is None:
                first.kill()
        assert first.returncode == 0, first.stderr.read() if first.stderr else ""
        assert "coding agent paused" in github_forge.labels("issue", number)
        assert "shutting down" in github_forge.comments("issue", number)[-1][1]
        state = _paused_state(tmp_path)
        assert state["paused"]["reason"] == "shutdown" and state["steps"] == 2

        second = spawn_cli(setup.config_path, "serve")
        try:
            wait_for(lambda: "coding agent done" in github_forge.labels("issue", number), 60, "the resumed task to end")
            second.send_signal(signal.SIGTERM)
            second.wait(timeout=60)
        finally:
            if second.poll() is None:
                second.kill()
        requests = model.requests

    assert second.returncode == 0
    _assert_no_step_repeated(requests)
    _assert_finished_cleanly(github_forge, number)

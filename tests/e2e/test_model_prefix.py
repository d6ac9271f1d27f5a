"""Prefix stability (SPEC 5.1): every request of a run extends the one before it.

A local server (llama.cpp, vLLM, Ollama, LM Studio) keeps the prompt it last read and
reads only what follows a common prefix: a clock, a counter or progress text rewritten in
an earlier message makes it read the whole history again at every step. Held here for
both protocols and planning mode, with comments arriving mid-run: each request's
messages start with the previous request's messages, unchanged (compared as serialized
JSON, key order included), and the rest of the request (model, options, tools) is the
same every time. Only compression (SPEC 9.3) may rewrite history; these runs never reach
its threshold.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from coding_agent.sandbox.replay_model import RecordedRequest, ReplaySandbox

from ._planning import create_then_done, markers, planning_config
from ._steering import (
    new_comment_messages,
    pause_signal_action,
    post_comment,
    run_cycle,
    steering_config,
    three_files_script,
)
from .conftest import MAINTAINER, READER, ForgeUnderTest, load_for_service, run_cli
from .test_planning_run import THREE_ACTIONS


def _serialized(message: Any) -> str:
    return json.dumps(message, ensure_ascii=False)


def assert_each_request_extends_the_last(requests: list[RecordedRequest], at_least: int = 3) -> None:
    """Byte for byte: the earlier messages, serialized, are the start of every later request."""
    assert len(requests) >= at_least
    for before, after in zip(requests, requests[1:]):
        earlier = [_serialized(m) for m in before.body["messages"]]
        later = [_serialized(m) for m in after.body["messages"]]
        assert len(later) > len(earlier), "a request adds to the history"
        for index, (was, now) in enumerate(zip(earlier, later)):
            assert was == now, f"message {index} was rewritten between requests:\n{was[:600]}\n--- became ---\n{now[:600]}"
        rest_before = {k: v for k, v in before.body.items() if k != "messages"}
        rest_after = {k: v for k, v in after.body.items() if k != "messages"}
        assert _serialized(rest_before) == _serialized(rest_after), "tools and options are the same in every request"


def _comment_action(forge: ForgeUnderTest, number: int) -> dict[str, Any]:
    def comment(args: dict[str, Any]) -> None:
        post_comment(forge, "issue", number, MAINTAINER, args["body"])

    return {"comment": comment}


@pytest.mark.parametrize("function_calling", [True, False], ids=["tool_calls", "json_text"])
def test_a_run_with_a_comment_mid_run_only_appends(
    github_forge: ForgeUnderTest, function_calling: bool, tmp_path: Path
) -> None:
    number = github_forge.open_task("issue", "Three files", "Please write a, b and c.")
    script = {
        "replies": [
            {"tool": "workspace/create", "args": {"path": "a.txt", "content": "a\n"}, "comment": "Writing a.txt."},
            {
                "before": {"comment": {"body": "Please make c.txt say c too."}},
                "tool": "workspace/create",
                "args": {"path": "b.txt", "content": "b\n"},
                "comment": "Writing b.txt.",
            },
            {"tool": "workspace/create", "args": {"path": "c.txt", "content": "c\n"}, "comment": "Writing c.txt."},
            {"tool": "workspace/view", "args": {"path": "c.txt"}, "comment": "Checking c.txt."},
            {"done": "Wrote three files."},
        ]
    }
    with ReplaySandbox(script, actions=_comment_action(github_forge, number)) as model:
        setup = steering_config(tmp_path, [github_forge], model, function_calling=function_calling)
        report = run_cycle(load_for_service(setup))
        requests = model.requests

    assert [result.status for result in report.results] == ["done"]
    assert len(requests) == 5
    assert new_comment_messages(requests[2]) == ["[New Comment from @alice]:\nPlease make c.txt say c too."]
    assert_each_request_extends_the_last(requests)


@pytest.mark.parametrize("function_calling", [True, False], ids=["tool_calls", "json_text"])
def test_a_planned_run_with_a_comment_mid_run_only_appends(
    github_forge: ForgeUnderTest, function_calling: bool, tmp_path: Path
) -> None:
    """Phase requests, the checklist in the progress comment, a reflection the comment
    brings (SPEC 10.4): all of it goes after the history, never into it."""
    number = github_forge.open_task("issue", "Three files", "Please write a, b and c.")
    phases = dict(THREE_ACTIONS)
    phases["execution a2"] = create_then_done("a2", "b.txt", before={"comment": {"body": "Also keep c.txt short."}})
    with ReplaySandbox({"phases": phases}, actions=_comment_action(github_forge, number)) as model:
        setup = planning_config(tmp_path, [github_forge], model, function_calling, reflection={"trigger_interval": 0})
        report = run_cycle(load_for_service(setup))
        requests = model.requests

    assert [result.status for result in report.results] == ["done"]
    assert "[Phase: reflection (comment)]" in markers(requests), "the comment brought a reflection"
    assert_each_request_extends_the_last(requests)


@pytest.mark.parametrize("function_calling", [True, False], ids=["tool_calls", "json_text"])
def test_a_paused_and_resumed_run_only_appends(github_forge: ForgeUnderTest, function_calling: bool, tmp_path: Path) -> None:
    """The run goes on in another process after a pause (SPEC 8.3): its system prompt, first
    turn and everything after are sent again exactly as before, and the comment that came
    while it was paused is appended."""
    number = github_forge.open_task("issue", "Three files", "Please write a, b and c.")
    with ReplaySandbox(three_files_script(1, "pause"), actions={"pause": pause_signal_action(tmp_path)}) as model:
        setup = steering_config(tmp_path, [github_forge], model, function_calling=function_calling)
        first = run_cycle(load_for_service(setup))
        assert [result.status for result in first.results] == ["paused"]
        post_comment(github_forge, "issue", number, READER, "While you were paused: use tabs.")
        resumed = run_cli(setup, "resume")
        requests = model.requests

    assert resumed.returncode == 0, resumed.stderr
    assert "coding agent done" in github_forge.labels("issue", number)
    assert any("use tabs" in message for message in new_comment_messages(requests[-1]))
    assert_each_request_extends_the_last(requests)

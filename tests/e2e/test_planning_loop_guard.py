"""The loop guard (SPEC 4, issue 15 acceptance test 6), in both reply protocols.

A model that repeats `workspace/view README.md` and gets the same file back each time is
told so at the third call and stopped, failed, at the fifth, with a comment naming the
call; a model that varies its arguments is never flagged.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from coding_agent.sandbox.replay_model import ReplaySandbox

from ._steering import pause_signal_action, run_cycle, steering_config, user_messages
from .conftest import ForgeUnderTest, load_for_service

VIEW_README: dict[str, Any] = {"tool": "workspace/view", "args": {"path": "README.md"}, "comment": "Reading the README."}


def _request_text(request: Any) -> str:
    """Everything the request sent after the system prompt, tool results included."""
    return "\n".join(str(m.get("content")) for m in request.body.get("messages", [])[1:])


@pytest.mark.parametrize("function_calling", [True, False], ids=["tool_calls", "json_text"])
def test_a_repeated_call_is_corrected_then_fails_the_run(
    github_forge: ForgeUnderTest, function_calling: bool, tmp_path: Path
) -> None:
    number = github_forge.open_task("issue", "Read the README", "What does the README say?")
    script = {"replies": [VIEW_README] * 8 + [{"done": "Read it."}]}

    with ReplaySandbox(script) as model:
        setup = steering_config(tmp_path, [github_forge], model, function_calling=function_calling)
        report = run_cycle(load_for_service(setup))
        requests = model.requests

    assert [result.status for result in report.results] == ["failed"]
    assert len(requests) == 5, "the fifth identical call ends the run: no sixth request"
    warning = "Loop guard: you have now repeated workspace/view"
    assert warning not in _request_text(requests[2]), "two repeats are not yet a loop"
    assert _request_text(requests[3]).count(warning) == 1, "the third repeat's result carries the correction"
    assert "README.md" in _request_text(requests[3]).split(warning)[1].split("3 times in a row")[0], "names the call"
    assert _request_text(requests[4]).count(warning) == 2, "the fourth is corrected too"
    labels = github_forge.labels("issue", number)
    assert "coding agent failed" in labels and "coding agent done" not in labels
    final = github_forge.comments("issue", number)[-1][1]
    assert final.startswith("## ❌ coding-agent failed")
    assert 'stuck: it repeated workspace/view {"path": "README.md"} 5 times in a row' in final
    assert github_forge.sandbox.state.pulls("acme/widgets") == [], "a stuck run opens no PR"  # type: ignore[attr-defined]


def test_varying_arguments_are_never_flagged(github_forge: ForgeUnderTest, tmp_path: Path) -> None:
    number = github_forge.open_task("issue", "Read the README", "Read the README line by line.")
    views = [
        {"tool": "workspace/view", "args": {"path": "README.md", "view_range": [1, line]}, "comment": "Reading."}
        for line in range(1, 8)
    ]
    script = {"replies": [*views, {"done": "Read it."}]}

    with ReplaySandbox(script) as model:
        setup = steering_config(tmp_path, [github_forge], model)
        report = run_cycle(load_for_service(setup))
        requests = model.requests

    assert [result.status for result in report.results] == ["done"]
    assert len(requests) == 8
    assert not any("Loop guard" in text for request in requests for text in user_messages(request))
    assert not any("Loop guard" in _request_text(request) for request in requests)
    assert "coding agent done" in github_forge.labels("issue", number)


def test_the_same_reply_text_is_a_loop_too(github_forge: ForgeUnderTest, tmp_path: Path) -> None:
    """JSON in text: the same unusable reply five times names the repeated text."""
    number = github_forge.open_task("issue", "Read the README", "What does the README say?")
    script = {"replies": [{"text": "I will look at the README."}] * 6}

    with ReplaySandbox(script) as model:
        setup = steering_config(tmp_path, [github_forge], model, function_calling=False)
        report = run_cycle(load_for_service(setup))
        requests = model.requests

    assert [result.status for result in report.results] == ["failed"]
    assert len(requests) == 5
    assert "Loop guard" in user_messages(requests[3])[-1], "the third identical reply is corrected by name"
    final = github_forge.comments("issue", number)[-1][1]
    assert 'the reply "I will look at the README." 5 times in a row' in final


def test_the_guard_can_be_switched_off(github_forge: ForgeUnderTest, tmp_path: Path) -> None:
    github_forge.open_task("issue", "Read the README", "What does the README say?")
    script = {"replies": [VIEW_README] * 6 + [{"done": "Read it."}]}

    with ReplaySandbox(script) as model:
        setup = steering_config(tmp_path, [github_forge], model, loop_guard={"enabled": False})
        report = run_cycle(load_for_service(setup))

    assert [result.status for result in report.results] == ["done"]


@pytest.mark.parametrize("function_calling", [True, False], ids=["tool_calls", "json_text"])
def test_the_counts_survive_a_pause_and_resume(github_forge: ForgeUnderTest, function_calling: bool, tmp_path: Path) -> None:
    """Two repeats, a pause (the third reply arrives as the signal file appears), a resume:
    the third repeat is still the third (corrected) and the fifth still ends the run."""
    number = github_forge.open_task("issue", "Read the README", "What does the README say?")
    paused_third = {**VIEW_README, "before": {"pause": {}}}
    script = {"replies": [VIEW_README, VIEW_README, paused_third, *[VIEW_README] * 5, {"done": "Read it."}]}

    with ReplaySandbox(script, actions={"pause": pause_signal_action(tmp_path)}) as model:
        setup = steering_config(tmp_path, [github_forge], model, function_calling=function_calling)
        first = run_cycle(load_for_service(setup))
        assert [result.status for result in first.results] == ["paused"]
        assert "coding agent paused" in github_forge.labels("issue", number)
        (tmp_path / "contexts" / "pause_signal").unlink()
        resumed = run_cycle(load_for_service(setup))
        requests = model.requests

    assert [result.status for result in resumed.results] == ["failed"]
    assert len(requests) == 5, "the fifth identical call ends the run, pause or not"
    warning = "Loop guard: you have now repeated workspace/view"
    assert warning not in _request_text(requests[2]), "two repeats are not yet a loop"
    assert _request_text(requests[3]).count(warning) == 1, "the third repeat, run after the resume, is corrected"
    final = github_forge.comments("issue", number)[-1][1]
    assert 'stuck: it repeated workspace/view {"path": "README.md"} 5 times in a row' in final
    labels = github_forge.labels("issue", number)
    assert "coding agent failed" in labels and "coding agent paused" not in labels

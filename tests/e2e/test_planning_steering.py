"""Planning mode under steering (SPEC 10.4; issue 15 acceptance tests 3, 4 and 5):
a failed action and a revision, a stop by unassigning the bot, a pause and its resume."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from coding_agent.sandbox.replay_model import ReplaySandbox

from ._forge_git import branch_file, task_branch
from ._planning import action, create_then_done, markers, plan, planning_config
from ._steering import assign, new_comment_messages, pause_signal_action, post_comment, run_cycle, unassign
from .conftest import MAINTAINER, REPO, ForgeUnderTest, load_for_service, progress_comments

VERIFIED = [{"verification": {"verification_passed": True, "issues_found": []}}]
REVISE = {"reflection": {"status": "failure", "evaluation": "b.txt cannot be written", "issues_identified": ["a2 failed"], "plan_revision_needed": True}}


def _three(**overrides: Any) -> dict[str, Any]:
    phases: dict[str, Any] = {
        "planning": [{"plan": plan()}],
        "execution a1": create_then_done("a1", "a.txt"),
        "execution a2": create_then_done("a2", "b.txt"),
        "execution a3": create_then_done("a3", "c.txt"),
        "reflection": [{"reflection": {"status": "success", "evaluation": "fine", "plan_revision_needed": False}}],
        "verification": VERIFIED,
        "completion": [{"done": "Wrote the files."}],
    }
    phases.update(overrides)
    return {"phases": phases}


def _created(request: Any, path: str) -> int:
    """How many tool calls in the request's history created `path`."""
    count = 0
    for message in request.body.get("messages", []):
        for call in message.get("tool_calls") or []:
            arguments = json.loads(call["function"]["arguments"] or "{}")
            count += call["function"]["name"].endswith("create") and arguments.get("path") == path
    return count


def test_a_failed_action_brings_reflection_and_revision(github_forge: ForgeUnderTest, tmp_path: Path) -> None:
    number = github_forge.open_task("issue", "Three files", "Please write a, b and c.")
    script = _three(**{
        "execution a2": create_then_done("a2", "b.txt", status="failed"),
        "reflection": [REVISE, REVISE],
        "revision": [{"revision": {"reason": "write other files", "actions": [action("b1", "Write d.txt"), action("b2", "Write e.txt")]}}],
        "execution b1": create_then_done("b1", "d.txt", status="failed"),
        "execution b2": create_then_done("b2", "e.txt"),
    })
    with ReplaySandbox(script) as model:
        setup = planning_config(tmp_path, [github_forge], model, revision={"max_revisions": 1}, reflection={"trigger_interval": 0})
        report = run_cycle(load_for_service(setup))
        requests = model.requests

    assert [result.status for result in report.results] == ["done"]
    assert markers(requests) == [
        "[Phase: planning]",
        "[Phase: execution a1 (1/3)]",
        "[Phase: execution a1 (1/3)]",
        "[Phase: execution a2 (2/3)]",
        "[Phase: execution a2 (2/3)]",
        "[Phase: reflection (error)]",
        "[Phase: revision 1/1]",
        "[Phase: execution b1 (3/4)]",
        "[Phase: execution b1 (3/4)]",
        "[Phase: reflection (error)]",
        "[Phase: execution b2 (4/4)]",
        "[Phase: execution b2 (4/4)]",
        "[Phase: verification 1/2]",
        "[Phase: completion]",
    ], "the second verdict wanting a revision brings none (max_revisions: 1)"
    assert _created(requests[-1], "a.txt") == 1, "a1's tool ran once"
    assert _created(requests[-1], "c.txt") == 0, "a3 never ran"
    [progress] = progress_comments([body for _, body in github_forge.comments("issue", number)])
    assert "- [ ] `a2` Write b.txt ❌ failed: b.txt: failed" in progress
    assert "- [ ] ~~`a3` Write c.txt~~ (dropped, revision 1)" in progress
    assert "- [x] `b2` Write e.txt" in progress and "**Actions:** 2/4 done" in progress


@pytest.mark.parametrize("function_calling", [True, False], ids=["tool_calls", "json_text"])
def test_unassigning_the_bot_stops_a_planned_run(github_forge: ForgeUnderTest, function_calling: bool, tmp_path: Path) -> None:
    number = github_forge.open_task("issue", "Three files", "Please write a, b and c.")
    assign(github_forge, "issue", number)
    script = _three(**{"execution a2": create_then_done("a2", "b.txt", before={"unassign": {}})})
    actions = {"unassign": lambda _: unassign(github_forge, "issue", number)}
    with ReplaySandbox(script, actions=actions) as model:
        setup = planning_config(tmp_path, [github_forge], model, function_calling)
        report = run_cycle(load_for_service(setup))
        requests = model.requests

    assert [result.status for result in report.results] == ["stopped"]
    assert markers(requests)[-1] == "[Phase: execution a2 (2/3)]" and len(requests) == 4, "no further request"
    bodies = [body for _, body in github_forge.comments("issue", number)]
    stops = [body for body in bodies if body.startswith("## ⛔ Task stopped")]
    assert len(stops) == 1
    assert "Actions: 1/3 · Phase: execution · Current action: a2" in stops[0]
    labels = github_forge.labels("issue", number)
    assert "coding agent stopped" in labels and "coding agent done" not in labels
    assert github_forge.sandbox.state.pulls(REPO) == []  # type: ignore[attr-defined]


@pytest.mark.parametrize("function_calling", [True, False], ids=["tool_calls", "json_text"])
def test_pause_and_resume_continue_at_the_same_checkpoint(github_forge: ForgeUnderTest, function_calling: bool, tmp_path: Path) -> None:
    number = github_forge.open_task("issue", "Three files", "Please write a, b and c.")
    script = _three(**{"execution a2": create_then_done("a2", "b.txt", before={"pause": {}})})
    signal_file = tmp_path / "contexts" / "pause_signal"
    with ReplaySandbox(script, actions={"pause": pause_signal_action(tmp_path)}) as model:
        setup = planning_config(tmp_path, [github_forge], model, function_calling, reflection={"trigger_interval": 0})
        first = run_cycle(load_for_service(setup))
        assert [result.status for result in first.results] == ["paused"]
        assert "coding agent paused" in github_forge.labels("issue", number)
        [paused] = list((tmp_path / "contexts" / "paused").iterdir())
        saved = json.loads((paused / "task_state.json").read_text())["planning"]
        assert saved["phase"] == "execution" and [a["status"] for a in saved["plan"]["actions"]] == ["done", "running", "pending"]
        before_pause = len(model.requests)

        post_comment(github_forge, "issue", number, MAINTAINER, "While paused: use capitals.")
        signal_file.unlink()
        second = run_cycle(load_for_service(setup))
        requests = model.requests

    assert [result.status for result in second.results] == ["done"]
    resumed = requests[before_pause]
    last_messages = resumed.body["messages"]
    assert "[New Comment from @alice]:\nWhile paused: use capitals." in new_comment_messages(resumed)
    assert any("b.txt" in str(m.get("content")) for m in last_messages[-3:]), "the tool result is sent, not re-run"
    assert markers(requests)[before_pause:] == [
        "[Phase: execution a2 (2/3)]",
        "[Phase: reflection (comment)]",
        "[Phase: execution a3 (3/3)]",
        "[Phase: execution a3 (3/3)]",
        "[Phase: verification 1/2]",
        "[Phase: completion]",
    ]
    assert branch_file(github_forge, task_branch(github_forge, number), "b.txt") == "b.txt\n"
    if function_calling:
        assert _created(requests[-1], "b.txt") == 1, "no tool ran twice"
    bodies = [body for _, body in github_forge.comments("issue", number)]
    [progress] = progress_comments(bodies)
    assert progress.count("- [x] `a") == 3
    labels = github_forge.labels("issue", number)
    assert "coding agent done" in labels and not {"coding agent paused", "coding agent processing"} & set(labels)


def test_an_unreadable_planning_state_fails_the_resumed_run(github_forge: ForgeUnderTest, tmp_path: Path) -> None:
    number = github_forge.open_task("issue", "Three files", "Please write a, b and c.")
    script = _three(**{"execution a2": create_then_done("a2", "b.txt", before={"pause": {}})})
    with ReplaySandbox(script, actions={"pause": pause_signal_action(tmp_path)}) as model:
        setup = planning_config(tmp_path, [github_forge], model)
        assert [result.status for result in run_cycle(load_for_service(setup)).results] == ["paused"]
        [paused] = list((tmp_path / "contexts" / "paused").iterdir())
        document = json.loads((paused / "task_state.json").read_text())
        document["planning"]["phase"] = "dancing"
        (paused / "task_state.json").write_text(json.dumps(document))
        (tmp_path / "contexts" / "pause_signal").unlink()
        requests = len(model.requests)
        second = run_cycle(load_for_service(setup))
        assert len(model.requests) == requests, "nothing is asked again"

    assert [result.status for result in second.results] == ["failed"]
    final = github_forge.comments("issue", number)[-1][1]
    assert final.startswith("## ❌ coding-agent failed") and "saved planning state: phase 'dancing' is unknown" in final
    assert "coding agent failed" in github_forge.labels("issue", number)


def test_a_limit_names_the_actions_and_the_phase(github_forge: ForgeUnderTest, tmp_path: Path) -> None:
    """Every request is a step toward `max_llm_process_num`; the limit's comment says where the run stood."""
    number = github_forge.open_task("issue", "Three files", "Please write a, b and c.")
    with ReplaySandbox(_three()) as model:
        setup = planning_config(tmp_path, [github_forge], model, extra={"max_llm_process_num": 4})
        report = run_cycle(load_for_service(setup))
        requests = model.requests

    assert [result.status for result in report.results] == ["failed"]
    assert len(requests) == 4
    final = github_forge.comments("issue", number)[-1][1]
    assert "step limit (4 model turns)" in final
    assert "Actions: 1/3 · Phase: execution · Current action: a2" in final


def test_without_a_progress_comment_the_checklist_is_posted(github_forge: ForgeUnderTest, tmp_path: Path) -> None:
    number = github_forge.open_task("issue", "Three files", "Please write a, b and c.")
    with ReplaySandbox(_three()) as model:
        setup = planning_config(tmp_path, [github_forge], model, extra={"progress_comment": {"enabled": False}})
        report = run_cycle(load_for_service(setup))

    assert [result.status for result in report.results] == ["done"]
    bodies = [body for _, body in github_forge.comments("issue", number)]
    checklists = [body for body in bodies if body.startswith("**Goal:**")]
    assert len(checklists) == 2, "after planning and at the end"
    assert checklists[0].count("- [ ] `a") == 3 and checklists[1].count("- [x] `a") == 3

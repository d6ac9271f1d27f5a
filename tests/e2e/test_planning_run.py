"""Planning mode end to end (SPEC 10; issue 15 acceptance tests 1 and 2), both protocols.

A planned run against the sandbox forge and the replay model: plan a1-a3, each action a
`workspace/create` then `action_done`, a reflection every two actions, verification and
completion; and plans that are wrong until corrected, or wrong five times.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from coding_agent.sandbox.replay_model import ReplaySandbox

from ._planning import action, create_then_done, marker_of, markers, plan, planning_config, tool_names
from ._steering import run_cycle


def _last_message(request: Any) -> str:
    """What the agent sent last: a correction is a user message, or (native) the phase call's result."""
    return str(request.body["messages"][-1].get("content"))
from .conftest import REPO, ForgeUnderTest, load_for_service, progress_comments

THREE_ACTIONS = {
    "planning": [{"plan": plan()}],
    "execution a1": create_then_done("a1", "a.txt"),
    "execution a2": create_then_done("a2", "b.txt"),
    "execution a3": create_then_done("a3", "c.txt"),
    "reflection": [{"reflection": {"status": "success", "evaluation": "on track", "issues_identified": [], "plan_revision_needed": False}}],
    "verification": [{"verification": {"verification_passed": True, "issues_found": [], "placeholder_detected": {"count": 0, "locations": []}}}],
    "completion": [{"done": "Wrote a.txt, b.txt and c.txt."}],
}


@pytest.mark.parametrize("function_calling", [True, False], ids=["tool_calls", "json_text"])
def test_a_planned_run_from_plan_to_pull_request(github_forge: ForgeUnderTest, function_calling: bool, tmp_path: Path) -> None:
    number = github_forge.open_task("issue", "Three files", "Please write a, b and c.")
    seen_progress: list[str] = []

    def look(_: dict) -> None:  # type: ignore[type-arg]
        seen_progress.extend(progress_comments([body for _, body in github_forge.comments("issue", number)]))

    phases = dict(THREE_ACTIONS)
    phases["execution a1"] = create_then_done("a1", "a.txt", before={"look": {}})
    with ReplaySandbox({"phases": phases}, actions={"look": look}) as model:
        setup = planning_config(tmp_path, [github_forge], model, function_calling, reflection={"trigger_interval": 2})
        report = run_cycle(load_for_service(setup))
        requests = model.requests

    assert [result.status for result in report.results] == ["done"]
    assert markers(requests) == [
        "[Phase: planning]",
        "[Phase: execution a1 (1/3)]",
        "[Phase: execution a1 (1/3)]",
        "[Phase: execution a2 (2/3)]",
        "[Phase: execution a2 (2/3)]",
        "[Phase: reflection (interval)]",
        "[Phase: execution a3 (3/3)]",
        "[Phase: execution a3 (3/3)]",
        "[Phase: verification 1/2]",
        "[Phase: completion]",
    ]
    for earlier, later in zip(requests, requests[1:]):
        sent, next_sent = earlier.body["messages"], later.body["messages"]
        assert next_sent[: len(sent)] == sent, "each prompt starts with the whole previous one"
    if function_calling:
        tools = [tool_names(request) for request in requests]
        assert all(names == tools[0] for names in tools), "the same tool list in every request"
        assert {"submit_plan", "action_done", "submit_reflection", "submit_revision", "submit_verification", "done"} <= set(tools[0])
    bodies = [body for _, body in github_forge.comments("issue", number)]
    [progress] = progress_comments(bodies)
    [before_first_tool] = seen_progress
    assert before_first_tool.count("- [ ] `a") == 3 and "- [x]" not in before_first_tool
    assert progress.count("- [x] `a") == 3 and "- [ ] `a" not in progress
    assert "**Actions:** 3/3 done" in progress
    assert "coding agent done" in github_forge.labels("issue", number)
    [pull] = github_forge.sandbox.state.pulls(REPO)  # type: ignore[attr-defined]
    assert pull.draft
    final = bodies[-1]
    assert "Wrote a.txt, b.txt and c.txt." in final and "Actions: 3/3 done" in final and "Verification: passed" in final


@pytest.mark.parametrize("function_calling", [True, False], ids=["tool_calls", "json_text"])
def test_a_bad_plan_is_corrected_by_name(github_forge: ForgeUnderTest, function_calling: bool, tmp_path: Path) -> None:
    number = github_forge.open_task("issue", "Three files", "Please write a, b and c.")
    duplicate = plan(action("a1", "Write a.txt"), action("a2", "Write b.txt"), action("a1", "Write c.txt"))
    phases = {
        "planning": [{"text": "Sure, I will write the three files."}, {"plan": duplicate}, {"plan": plan()}],
        **{key: value for key, value in THREE_ACTIONS.items() if key != "planning"},
    }
    with ReplaySandbox({"phases": phases}) as model:
        setup = planning_config(tmp_path, [github_forge], model, function_calling)
        report = run_cycle(load_for_service(setup))
        requests = model.requests

    assert [result.status for result in report.results] == ["done"]
    assert [marker_of(request) for request in requests[:3]] == ["[Phase: planning]"] * 3
    assert "could not be used: no JSON object found" in _last_message(requests[1])
    assert 'actions[2].id "a1" is not unique' in _last_message(requests[2])
    assert marker_of(requests[3]) == "[Phase: execution a1 (1/3)]"
    assert "coding agent done" in github_forge.labels("issue", number)


@pytest.mark.parametrize("function_calling", [True, False], ids=["tool_calls", "json_text"])
def test_five_invalid_plans_fail_the_run(github_forge: ForgeUnderTest, function_calling: bool, tmp_path: Path) -> None:
    number = github_forge.open_task("issue", "Three files", "Please write a, b and c.")
    too_many = plan(*(action(f"a{n}", f"Write {n}.txt") for n in range(1, 5)))
    bad = [
        {"text": "Let me think about it."},
        {"plan": {**plan(), "goal_understanding": {"main_objective": "", "success_criteria": []}}},
        {"plan": too_many},
        {"plan": plan(action("a 1", "Write a.txt"))},
        {"plan": plan(action("a1", ""))},
        {"plan": plan()},
    ]
    with ReplaySandbox({"phases": {"planning": bad}}) as model:
        kept = {"workspace": {"base_dir": str(tmp_path / "workspaces"), "keep_finished": True}}  # looked at below
        setup = planning_config(tmp_path, [github_forge], model, function_calling, extra=kept, max_actions=3)
        report = run_cycle(load_for_service(setup))
        requests = model.requests

    assert [result.status for result in report.results] == ["failed"]
    assert len(requests) == 5
    corrections = [_last_message(request) for request in requests[1:]]
    assert "goal_understanding.main_objective must not be empty" in corrections[1]
    assert "goal_understanding.success_criteria must hold at least one criterion" in corrections[1]
    assert "4 actions in all is over the limit of 3" in corrections[2]
    assert 'actions[0].id "a 1" must be' in corrections[3]
    labels = github_forge.labels("issue", number)
    assert "coding agent failed" in labels and "coding agent done" not in labels
    final = github_forge.comments("issue", number)[-1][1]
    assert final.startswith("## ❌ coding-agent failed") and "Phase: planning" in final
    workspace = next(setup.workspaces.iterdir())
    assert sorted(p.name for p in workspace.iterdir() if p.name != ".git") == ["README.md"], "no tool ran"
    assert github_forge.sandbox.state.pulls(REPO) == []  # type: ignore[attr-defined]


def test_demo_planning_shows_a_planned_run(tmp_path: Path) -> None:
    """`coding-agent demo --planning`: the whole planned run on the built-in sandbox."""
    result = subprocess.run(
        [sys.executable, "-m", "coding_agent.cli", "demo", "--planning", "--dir", str(tmp_path / "demo")],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=300,
    )

    assert result.returncode == 0, result.stderr
    assert "**Phase:** completed · **Actions:** 2/2 done" in result.stdout
    assert "- [x] `a1` Write hello.py with a greeting() function" in result.stdout
    assert "Actions: 2/2 done · Revisions: 0 · Verification: passed" in result.stdout
    assert "Pull request demo/hello-world#2 (draft)" in result.stdout and "files changed: hello.py" in result.stdout

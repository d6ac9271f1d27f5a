"""Phase objects of SPEC 10.2: what is valid, what each correction names, the lenient forms."""

from __future__ import annotations

from typing import Any

import pytest

from coding_agent.agent.planning.models import PlanningState
from coding_agent.agent.planning.replies import find_phase_reply
from coding_agent.agent.planning.state import PlanningStateError, dump_state, load_planning_state
from coding_agent.agent.planning.validation import (
    read_action_done,
    read_actions,
    read_plan,
    read_reflection,
    read_revision,
    read_verification,
)
from coding_agent.llm.types import LLMReply, ToolCallRequest


def _plan(*actions: dict[str, Any]) -> dict[str, Any]:
    return {
        "goal_understanding": {"main_objective": "Add a flag", "success_criteria": ["it parses"]},
        "action_plan": {"actions": list(actions)},
    }


def test_a_valid_plan_is_read() -> None:
    plan, problems = read_plan(_plan({"id": "a1", "description": "Read cli.py", "tool_hints": ["workspace/view"]}), 20)
    assert problems == [] and plan is not None
    assert [(a.id, a.description, a.tool_hints, a.status) for a in plan.actions] == [("a1", "Read cli.py", ["workspace/view"], "pending")]


def test_every_problem_is_named() -> None:
    data = _plan(
        {"id": "a1", "description": "one"},
        {"id": "a2", "description": ""},
        {"id": "a1", "description": "three"},
        {"id": "bad id!", "description": "four"},
    )
    data["goal_understanding"] = {"main_objective": " ", "success_criteria": []}
    plan, problems = read_plan(data, 3)
    assert plan is None
    assert problems == [
        "goal_understanding.main_objective must not be empty",
        "goal_understanding.success_criteria must hold at least one criterion",
        "actions[1].description must not be empty",
        'actions[2].id "a1" is not unique',
        'actions[3].id "bad id!" must be 1-32 characters of letters, digits, "_", "." or "-"',
        "actions: 4 actions in all is over the limit of 3",
    ]


def test_an_empty_plan_is_a_problem_not_a_crash() -> None:
    assert read_plan({}, 20)[1][-1] == "actions must hold at least one action"
    assert read_plan({"goal_understanding": "x", "action_plan": {"actions": "x"}}, 20)[1][-1] == "actions must be a list of actions"


def test_the_reference_names_are_accepted() -> None:
    actions, problems = read_actions([{"task_id": "t1", "purpose": "Read it", "tool": "workspace/view", "parameters": {"path": "x"}}], set())
    assert problems == []
    assert (actions[0].id, actions[0].description, actions[0].tool_hints) == ("t1", "Read it", ["workspace/view"])


def test_action_done_must_name_the_current_action() -> None:
    assert read_action_done({"action_done": {"id": "a1", "status": "done", "summary": "ok"}}, "a1")[0] is not None
    _, problems = read_action_done({"action_done": {"id": "a2", "status": "finished"}}, "a1")
    assert problems == ['action_done.id "a2" is not the current action "a1"', 'action_done.status "finished" must be "done" or "failed"']


def test_a_reflection_wrapper_is_unwrapped() -> None:
    verdict, problems = read_reflection({"reflection": {"status": "partial", "evaluation": "meh"}, "plan_revision_needed": True})
    assert problems == [] and verdict is not None
    assert verdict["status"] == "partial" and verdict["plan_revision_needed"] is True
    assert read_reflection({"status": "great"})[1] == ['status "great" must be "success", "partial" or "failure"']


def test_revision_ids_are_new_and_count_the_ended_actions() -> None:
    _, problems = read_revision({"actions": [{"id": "a1", "description": "again"}, {"id": "b1", "description": "new"}]}, {"a1"}, 19, 20)
    assert problems == ['actions[0].id "a1" is not unique', "actions: 21 actions in all is over the limit of 20"]


def test_verification_additions_are_actions() -> None:
    result, problems = read_verification({"verification_passed": False, "additional_actions": [{"id": "v1", "description": "fix"}]}, {"a1"}, 1, 20)
    assert problems == [] and result is not None and [a.id for a in result["additional_actions"]] == ["v1"]
    assert read_verification({"verification_passed": "maybe"}, set(), 1, 20)[1] == ["verification_passed must be true or false"]


@pytest.mark.parametrize(
    ("content", "kind"),
    [
        ('<think>plan first</think>```json\n{"phase": "planning", "goal_understanding": {}}\n```', "planning"),
        ('Done with it: {"action_done": {"id": "a1", "status": "done"}}', "action_done"),
        ('{"reflection": {"status": "success"}}', "reflection"),
        ('{"comment": "x", "command": {"tool": "workspace/view", "args": {}}}', None),
        ("no json at all", None),
    ],
)
def test_phase_replies_in_text(content: str, kind: str | None) -> None:
    found = find_phase_reply(LLMReply(content=content), native=False)
    assert (found.kind if found else None) == kind


def test_native_phase_calls() -> None:
    reply = LLMReply(content="", tool_calls=(ToolCallRequest(id="c1", name="action_done", arguments={"id": "a1", "status": "done"}),))
    found = find_phase_reply(reply, native=True)
    assert found is not None and found.kind == "action_done" and found.call_id == "c1"
    assert found.data == {"action_done": {"id": "a1", "status": "done"}}


@pytest.mark.parametrize(
    "content",
    [
        '<tool_call>\n{"name": "action_done", "arguments": {"id": "a1", "status": "done"}}\n</tool_call>',
        '[TOOL_CALLS]action_done[ARGS]{"id": "a1", "status": "done"}',
        "<|python_start|>[action_done(id='a1', status='done')]<|python_end|>",
    ],
    ids=["hermes", "mistral", "llama4"],
)
def test_native_phase_calls_written_as_text(content: str) -> None:
    found = find_phase_reply(LLMReply(content=content), native=True)
    assert found is not None and found.kind == "action_done" and found.call_id is None
    assert found.data == {"action_done": {"id": "a1", "status": "done"}}


def test_the_state_round_trips_and_bad_state_is_named() -> None:
    plan, _ = read_plan(_plan({"id": "a1", "description": "one"}), 20)
    state = PlanningState(phase="execution", plan=plan, action_index=0)
    assert load_planning_state(dump_state(state)) == state
    with pytest.raises(PlanningStateError, match="phase 'nowhere' is unknown"):
        load_planning_state({**dump_state(state), "phase": "nowhere"})
    with pytest.raises(PlanningStateError, match="missing"):
        load_planning_state(None)
    broken = dump_state(state)
    broken["plan"]["actions"][0]["status"] = "exploded"
    with pytest.raises(PlanningStateError, match=r"plan.actions\[0\].status 'exploded' is unknown"):
        load_planning_state(broken)


def test_the_dumped_state_is_asdict_and_shares_nothing_with_the_live_state() -> None:
    """dump_state runs at every crash checkpoint: written out for speed, it must give
    what `dataclasses.asdict` gives, in fresh containers, so that the state changing
    after the checkpoint never changes what was saved."""
    import dataclasses
    from collections import OrderedDict, namedtuple

    from coding_agent.agent.planning.models import Action, Goal, Plan

    pair = namedtuple("pair", "a b")
    actions = [Action(id=f"a{n}", description=f"read {n}", tool_hints=["workspace/view"], status="done") for n in range(3)]
    plan = Plan(goal=Goal("read", ["all read"], ["none"]), subtasks=[{"id": "s1", "dependencies": ["s0"]}], reasoning="r", actions=actions)
    state = PlanningState(
        phase="execution",
        plan=plan,
        action_index=1,
        reflections=[{"status": "success", "issues_identified": ["x"], "ordered": OrderedDict(k=[1])}],
        pending_tool_result={"call_id": "c1", "text": "out", "pair": pair([1], (2, [3])), "n": 1.5, "ok": None},
    )
    dumped = dump_state(state)
    assert dumped == dataclasses.asdict(state)
    assert type(dumped["pending_tool_result"]["pair"]) is pair and type(dumped["reflections"][0]["ordered"]) is OrderedDict
    state.plan.actions[0].tool_hints.append("workspace/create")  # type: ignore[union-attr]
    state.plan.subtasks[0]["dependencies"].append("s2")  # type: ignore[union-attr]
    state.reflections[0]["issues_identified"].append("y")
    state.pending_tool_result["pair"].a.append(9)  # type: ignore[index]
    assert dumped["plan"]["actions"][0]["tool_hints"] == ["workspace/view"]
    assert dumped["plan"]["subtasks"][0]["dependencies"] == ["s0"]
    assert dumped["reflections"][0]["issues_identified"] == ["x"]
    assert dumped["pending_tool_result"]["pair"].a == [1]
    assert load_planning_state(dump_state(state)) == state

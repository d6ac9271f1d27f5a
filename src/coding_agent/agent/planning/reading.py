"""Reading a phase reply against the current phase: which validator, and what to tell the
model when its reply is not the one the phase asks for."""

from __future__ import annotations

from typing import Any

from coding_agent.agent.planning import validation
from coding_agent.agent.planning.models import PlanningState
from coding_agent.agent.planning.replies import PhaseReply

__all__ = ["TOOL_NAMES", "shape", "json_reminder", "validate"]

TOOL_NAMES = {
    "planning": "submit_plan",
    "reflection": "submit_reflection",
    "revision": "submit_revision",
    "verification": "submit_verification",
}
_JSON_SHAPES = {
    "planning": (
        '{"phase": "planning", "goal_understanding": {...}, "task_decomposition": {...}, "action_plan": {"actions": [...]}}'
    ),
    "reflection": (
        '{"phase": "reflection", "status": "...", "evaluation": "...", "issues_identified": [], "plan_revision_needed": false}'
    ),
    "revision": '{"phase": "revision", "reason": "...", "actions": [...]}',
    "verification": '{"phase": "verification", "verification_passed": true, "issues_found": [], "additional_actions": []}',
}


def shape(phase: str, native: bool) -> str:
    """How to answer `phase` (one of TOOL_NAMES), for a correction."""
    return f"call `{TOOL_NAMES[phase]}`" if native else f"reply with {_JSON_SHAPES[phase]}"


def json_reminder(state: PlanningState) -> str:
    """The JSON-in-text reply the current phase expects, closing a correction."""
    phase = state.phase
    if phase in _JSON_SHAPES:
        return f"[{phase}] Answer with one JSON object: {_JSON_SHAPES[phase]}."
    if phase == "execution":
        current = state.current()
        ident = current.id if current else "?"
        return (
            'Answer with one JSON object: the next {"comment": ..., "command": {...}}, or '
            f'{{"action_done": {{"id": "{ident}", "status": "done", "summary": "..."}}}}.'
        )
    return 'Answer with one JSON object: {"done": true, "comment": "<the final comment>"}.'


def validate(found: PhaseReply, state: PlanningState, max_actions: int) -> tuple[Any, list[str]]:
    """The phase object read against the run so far: (result, problems)."""
    plan = state.plan
    data = found.data
    kept = len([a for a in plan.counted() if a.status != "pending"]) if plan else 0
    taken = state.all_ids()
    if found.kind == "planning":
        return validation.read_plan(data, max_actions)
    if found.kind == "action_done":
        current = state.current()
        return validation.read_action_done(data, current.id if current else "")
    if found.kind == "reflection":
        return validation.read_reflection(data)
    if found.kind == "revision":
        return validation.read_revision(data, taken, kept, max_actions)
    return validation.read_verification(data, taken, len(plan.counted()) if plan else 0, max_actions)

"""Reading the phase objects of SPEC 10.2 from what the model sent, and saying what is wrong.

Every reader returns the object or the list of its problems, each naming the field
(`actions[2].id "a1" is not unique`), so that one correction tells a weak model all it
has to fix. The reference's names are accepted too (`task_id`, `purpose`, `tool`; its
`parameters` ignored; a `"reflection": {...}` wrapper unwrapped): SPEC 10.2's lenient forms.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from coding_agent.agent.planning.models import Action, Goal, Plan

__all__ = ["Problems", "read_plan", "read_actions", "read_action_done", "read_reflection", "read_verification", "read_revision"]

_ID = re.compile(r"^[A-Za-z0-9_.-]{1,32}$")
Problems = list[str]


def _text(value: Any) -> str:
    return value.strip() if isinstance(value, str) else ""


def _strings(value: Any) -> list[str]:
    if isinstance(value, str):
        return [value.strip()] if value.strip() else []
    if isinstance(value, list):
        return [str(item).strip() for item in value if str(item).strip()]
    return []


def _mapping(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def read_actions(items: Any, taken: set[str], where: str = "actions") -> tuple[list[Action], Problems]:
    """Actions from a list; ids must be new (not in `taken`, not repeated)."""
    if not isinstance(items, list):
        return [], [f"{where} must be a list of actions"]
    actions: list[Action] = []
    problems: Problems = []
    seen = set(taken)
    for index, raw in enumerate(items):
        here = f"{where}[{index}]"
        if not isinstance(raw, dict):
            problems.append(f"{here} must be an object")
            continue
        identifier = raw.get("id", raw.get("task_id"))
        identifier = str(identifier).strip() if isinstance(identifier, (str, int)) else ""
        if not _ID.match(identifier):
            problems.append(f'{here}.id "{identifier}" must be 1-32 characters of letters, digits, "_", "." or "-"')
        elif identifier in seen:
            problems.append(f'{here}.id "{identifier}" is not unique')
        seen.add(identifier)
        description = _text(raw.get("description", raw.get("purpose")))
        if not description:
            problems.append(f"{here}.description must not be empty")
        hints = _strings(raw.get("tool_hints"))
        if not hints and isinstance(raw.get("tool"), str):
            hints = _strings(raw["tool"])
        actions.append(
            Action(
                id=identifier,
                description=description,
                subtask=_text(raw.get("subtask")),
                tool_hints=hints,
                expected_outcome=_text(raw.get("expected_outcome")),
            )
        )
    return actions, problems


def _room(count: int, kept: int, max_actions: int, where: str) -> Problems:
    total = count + kept
    if count == 0 and kept == 0:
        return [f"{where} must hold at least one action"]
    if total > max_actions:
        return [f"{where}: {total} actions in all is over the limit of {max_actions}"]
    return []


def read_plan(data: dict[str, Any], max_actions: int) -> tuple[Plan | None, Problems]:
    goal_raw = _mapping(data.get("goal_understanding"))
    problems: Problems = []
    objective = _text(goal_raw.get("main_objective"))
    if not objective:
        problems.append("goal_understanding.main_objective must not be empty")
    criteria = _strings(goal_raw.get("success_criteria"))
    if not criteria:
        problems.append("goal_understanding.success_criteria must hold at least one criterion")
    decomposition = _mapping(data.get("task_decomposition"))
    subtasks = [item for item in decomposition.get("subtasks") or [] if isinstance(item, dict)]
    plan_raw = _mapping(data.get("action_plan"))
    items = plan_raw.get("actions", data.get("actions"))
    items = [] if items is None else items
    actions, action_problems = read_actions(items, set())
    problems += action_problems
    if isinstance(items, list):
        problems += _room(len(items), 0, max_actions, "actions")
    if problems:
        return None, problems
    goal = Goal(objective, criteria, _strings(goal_raw.get("constraints")))
    return Plan(goal, subtasks, _text(decomposition.get("reasoning")), actions), []


@dataclass(frozen=True)
class ActionDone:
    id: str
    status: str
    summary: str


def read_action_done(data: dict[str, Any], current: str) -> tuple[ActionDone | None, Problems]:
    raw = data.get("action_done", data)
    if not isinstance(raw, dict):
        return None, ["action_done must be an object {id, status, summary}"]
    problems: Problems = []
    identifier = str(raw.get("id", raw.get("task_id", ""))).strip()
    if identifier != current:
        problems.append(f'action_done.id "{identifier}" is not the current action "{current}"')
    status = _text(raw.get("status")).lower()
    if status not in ("done", "failed"):
        problems.append(f'action_done.status "{status}" must be "done" or "failed"')
    if problems:
        return None, problems
    return ActionDone(identifier, status, _text(raw.get("summary"))), []


def read_reflection(data: dict[str, Any]) -> tuple[dict[str, Any] | None, Problems]:
    raw = data["reflection"] if isinstance(data.get("reflection"), dict) else data
    status = _text(raw.get("status")).lower()
    problems: Problems = []
    if status not in ("success", "partial", "failure"):
        problems.append(f'status "{status}" must be "success", "partial" or "failure"')
    needed = raw.get("plan_revision_needed", data.get("plan_revision_needed", False))
    if not isinstance(needed, bool):
        problems.append("plan_revision_needed must be true or false")
    if problems:
        return None, problems
    return {
        "status": status,
        "evaluation": _text(raw.get("evaluation")),
        "issues_identified": _strings(raw.get("issues_identified")),
        "plan_revision_needed": needed,
    }, []


def read_revision(data: dict[str, Any], taken: set[str], kept: int, max_actions: int) -> tuple[list[Action], Problems]:
    """Replacements for every pending action; `kept` ended actions count toward the limit."""
    items = data.get("actions")
    actions, problems = read_actions(items, taken)
    if isinstance(items, list):
        problems += _room(len(items), kept, max_actions, "actions")
    return actions, problems


def read_verification(
    data: dict[str, Any], taken: set[str], kept: int, max_actions: int
) -> tuple[dict[str, Any] | None, Problems]:
    passed = data.get("verification_passed")
    problems: Problems = []
    if not isinstance(passed, bool):
        problems.append("verification_passed must be true or false")
    items = data.get("additional_actions") or []
    additions, action_problems = read_actions(items, taken, "additional_actions")
    problems += action_problems
    if isinstance(items, list) and items and len(items) + kept > max_actions:
        problems.append(f"additional_actions: {len(items) + kept} actions in all is over the limit of {max_actions}")
    if problems:
        return None, problems
    placeholders = _mapping(data.get("placeholder_detected"))
    return {
        "verification_passed": passed,
        "issues_found": _strings(data.get("issues_found")),
        "placeholder_detected": {
            "count": placeholders.get("count") if isinstance(placeholders.get("count"), int) else 0,
            "locations": _strings(placeholders.get("locations")),
        },
        "additional_actions": additions,
    }, []

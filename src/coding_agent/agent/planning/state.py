"""`task_state.json`'s `planning` (SPEC 10.4): the planning state, saved and read back.

Reading is strict: a state that cannot be read fails the run with a comment (SPEC 10.4)
rather than re-planning over work already done or pushed.
"""

from __future__ import annotations

import copy
from collections import defaultdict
from dataclasses import fields, is_dataclass
from typing import Any, cast

from coding_agent.agent.planning.models import ENDED, PHASES, Action, Goal, Plan, PlanningState
from coding_agent.errors import AgentError

__all__ = ["dump_state", "load_planning_state", "PlanningStateError"]

_STATUSES = frozenset({"pending", "running", *ENDED, "dropped"})


class PlanningStateError(AgentError):
    """The saved planning state is unreadable; the message says which part."""


def dump_state(state: PlanningState) -> dict[str, Any]:
    """`dataclasses.asdict(state)`: fresh containers all the way down, so that the state
    changing later never changes what was dumped. Written out because it runs at every
    crash checkpoint, and `asdict` (a `deepcopy` call per string and number) was the
    largest part of a planned step's checkpoint."""
    dumped: dict[str, Any] = _copied(state)
    return dumped


_FIELDS: dict[type, tuple[str, ...]] = {}
_ATOMS = (str, int, float, bool, type(None))


def _copied(value: Any) -> Any:
    kind = type(value)
    if kind in _ATOMS:
        return value
    if kind is list:
        return [_copied(item) for item in value]
    if kind is dict:
        return {_copied(key): _copied(item) for key, item in value.items()}
    if is_dataclass(value) and not isinstance(value, type):
        names = _FIELDS.get(kind)
        if names is None:
            names = _FIELDS[kind] = tuple(item.name for item in fields(value))
        return {name: _copied(getattr(value, name)) for name in names}
    # What `asdict` does with the rest (namedtuples, subclasses, defaultdicts, objects).
    if isinstance(value, tuple) and hasattr(value, "_fields"):
        return kind(*[_copied(item) for item in value])
    if isinstance(value, (list, tuple)):
        return kind(_copied(item) for item in value)
    if isinstance(value, dict):
        if hasattr(kind, "default_factory"):
            result = kind(cast("defaultdict[Any, Any]", value).default_factory)
            for key, item in value.items():
                result[_copied(key)] = _copied(item)
            return result
        return kind((_copied(key), _copied(item)) for key, item in value.items())
    return copy.deepcopy(value)


def _action(raw: Any, where: str) -> Action:
    if not isinstance(raw, dict):
        raise PlanningStateError(f"saved planning state: {where} is not an object")
    try:
        action = Action(**raw)
    except TypeError as error:
        raise PlanningStateError(f"saved planning state: {where}: {error}") from None
    if action.status not in _STATUSES:
        raise PlanningStateError(f"saved planning state: {where}.status {action.status!r} is unknown")
    return action


def _plan(raw: Any) -> Plan | None:
    if raw is None:
        return None
    if not isinstance(raw, dict) or not isinstance(raw.get("goal"), dict) or not isinstance(raw.get("actions"), list):
        raise PlanningStateError("saved planning state: plan needs a goal and a list of actions")
    try:
        goal = Goal(**raw["goal"])
    except TypeError as error:
        raise PlanningStateError(f"saved planning state: plan.goal: {error}") from None
    actions = [_action(item, f"plan.actions[{index}]") for index, item in enumerate(raw["actions"])]
    return Plan(goal, list(raw.get("subtasks") or []), str(raw.get("reasoning") or ""), actions)


def load_planning_state(raw: Any) -> PlanningState:
    """The state saved by `dump_state`; `PlanningStateError` names what is wrong."""
    if not isinstance(raw, dict):
        raise PlanningStateError("saved planning state is missing or not an object")
    data = dict(raw)
    if data.get("phase") not in PHASES:
        raise PlanningStateError(f"saved planning state: phase {data.get('phase')!r} is unknown")
    data["plan"] = _plan(data.get("plan"))
    try:
        state = PlanningState(**data)
    except TypeError as error:
        raise PlanningStateError(f"saved planning state: {error}") from None
    for name in (
        "action_index", "action_step", "actions_since_reflection", "revision_count", "verification_round", "seen_messages"
    ):
        if not isinstance(getattr(state, name), int):
            raise PlanningStateError(f"saved planning state: {name} must be a number")
    if state.phase != "planning" and state.plan is None:
        raise PlanningStateError(f"saved planning state: phase {state.phase} without a plan")
    return state

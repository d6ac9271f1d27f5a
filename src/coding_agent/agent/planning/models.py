"""What planning mode knows about a run (SPEC 10): the goal, the actions, where it stands.

Plain dataclasses, saved as they are with a pause (`state.py`) and shown as the progress
comment's checklist (`checklist.py`). The phase driver (`driver.py`) is the only writer.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

__all__ = ["Action", "Goal", "Plan", "PlanningState", "Phase", "ActionStatus", "ENDED", "PHASES"]

Phase = Literal["planning", "execution", "reflection", "revision", "verification", "completion"]
PHASES: tuple[Phase, ...] = ("planning", "execution", "reflection", "revision", "verification", "completion")
ActionStatus = Literal["pending", "running", "done", "failed", "skipped", "dropped"]
ENDED = frozenset({"done", "failed", "skipped"})


@dataclass
class Action:
    """One step of the plan. Arguments are chosen when it runs, never in the plan."""

    id: str
    description: str
    subtask: str = ""
    tool_hints: list[str] = field(default_factory=list)
    expected_outcome: str = ""
    status: ActionStatus = "pending"
    summary: str = ""
    dropped_in: int = 0  # the revision that dropped it


@dataclass
class Goal:
    main_objective: str
    success_criteria: list[str]
    constraints: list[str] = field(default_factory=list)


@dataclass
class Plan:
    goal: Goal
    subtasks: list[dict[str, Any]]
    reasoning: str
    actions: list[Action]

    def counted(self) -> list[Action]:
        """The actions that count toward done/total: all but the dropped ones."""
        return [action for action in self.actions if action.status != "dropped"]

    def pending(self) -> list[Action]:
        return [action for action in self.actions if action.status == "pending"]

    def done_count(self) -> int:
        return sum(action.status == "done" for action in self.actions)


@dataclass
class PlanningState:
    """Where a planned run stands; `task_state.json`'s `planning` (SPEC 10.4)."""

    phase: Phase = "planning"
    plan: Plan | None = None
    action_index: int = -1  # the running action's index in plan.actions
    action_step: int = 0  # requests made in the current action (or phase)
    actions_since_reflection: int = 0
    pending_reflection: str | None = None  # error | interval | comment
    reflections: list[dict[str, Any]] = field(default_factory=list)
    revision_count: int = 0
    verification_round: int = 0
    verification: dict[str, Any] | None = None  # the last verification's result
    pending_tool_result: dict[str, Any] | None = None
    progress_comment_id: str | None = None
    prompt_sent: bool = False  # the current phase's (or action's) prompt is in the history
    seen_messages: int = 0  # history length when new comments were last looked for

    def current(self) -> Action | None:
        if self.plan is None or not 0 <= self.action_index < len(self.plan.actions):
            return None
        return self.plan.actions[self.action_index]

    def all_ids(self) -> set[str]:
        return {action.id for action in self.plan.actions} if self.plan is not None else set()

"""The plan as the progress comment's checklist (SPEC 10.5).

    - [x] `a1` Read src/cli.py
    - [ ] `a2` Add the --json flag ❌ failed: tests fail
    - [ ] ~~`a3` Update README~~ (dropped, revision 1)
    - [ ] `b1` Fix flag parsing ⏳ step 2/10

Only actions that ended `done` are ticked. The headline above it gives the goal, the
phase, actions done/total, revisions and steps.

The goal, descriptions and summaries are the model's words: `shown` says how they appear.
On a forge that is inert markdown (`agent/markdown.py`, after redaction); the dashboard
and the completion prompt take them as they are.
"""

from __future__ import annotations

from collections.abc import Callable

from coding_agent.agent.planning.models import Action, PlanningState

__all__ = ["checklist_lines", "headline", "position", "Shown"]

_SUMMARY_CHARS = 120

# How the model's words appear in the checklist's markdown.
Shown = Callable[[str], str]


def _as_is(text: str) -> str:
    return text


def _short(text: str, limit: int = _SUMMARY_CHARS) -> str:
    text = " ".join(text.split()).replace("`", "'")
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _line(action: Action, state: PlanningState, max_steps: int, shown: Shown) -> str:
    label = f"`{action.id}` {shown(_short(action.description))}"
    if action.status == "done":
        return f"- [x] {label}"
    if action.status == "dropped":
        return f"- [ ] ~~{label}~~ (dropped, revision {action.dropped_in})"
    if action.status == "failed":
        return f"- [ ] {label} ❌ failed" + (f": {shown(_short(action.summary))}" if action.summary else "")
    if action.status == "skipped":
        return f"- [ ] {label} (skipped)"
    if action.status == "running":
        return f"- [ ] {label} ⏳ step {max(state.action_step, 1)}/{max_steps}"
    return f"- [ ] {label}"


def checklist_lines(state: PlanningState, max_steps: int, shown: Shown = _as_is) -> list[str]:
    if state.plan is None:
        return []
    return [_line(action, state, max_steps, shown) for action in state.plan.actions]


def position(state: PlanningState) -> tuple[int, int]:
    """(actions ended done, actions not dropped)."""
    if state.plan is None:
        return 0, 0
    return state.plan.done_count(), len(state.plan.counted())


def headline(state: PlanningState, phase_label: str, steps: int, shown: Shown = _as_is) -> str:
    done, total = position(state)
    goal = shown(_short(state.plan.goal.main_objective)) if state.plan is not None else "(planning)"
    return (
        f"**Goal:** {goal}\n**Phase:** {phase_label} · **Actions:** {done}/{total} done · "
        f"**Revisions:** {state.revision_count} · **Steps:** {steps}"
    )

"""The phase requests of SPEC 10, rendered from `prompts/templates/planning/*.j2`.

Each starts with its marker line exactly as SPEC 10 writes it; the replay model keys
planning scripts on these markers, and a model reading a long history finds its place
by them.
"""

from __future__ import annotations

from typing import Any

from coding_agent.agent.planning.models import Action, PlanningState
from coding_agent.prompts.prompting import template

__all__ = ["marker", "render_phase", "render_instructions", "ended_actions"]


def marker(state: PlanningState, reason: str = "", max_revisions: int = 0, max_rounds: int = 0) -> str:
    phase = state.phase
    if phase == "execution":
        counted = state.plan.counted() if state.plan is not None else []
        current = state.current()
        number = next((i for i, action in enumerate(counted, 1) if action is current), 0)
        return f"[Phase: execution {current.id if current else '?'} ({number}/{len(counted)})]"
    if phase == "revision":
        return f"[Phase: revision {state.revision_count + 1}/{max_revisions}]"
    if phase == "reflection":
        return f"[Phase: reflection ({reason})]"
    if phase == "verification":
        return f"[Phase: verification {state.verification_round}/{max_rounds}]"
    return f"[Phase: {phase}]"


def render_instructions(native: bool, max_actions: int) -> str:
    """The planning part of the system prompt (stable for the whole run: prefix caching)."""
    return template("planning/instructions.j2").render(native=native, max_actions=max_actions).strip()


def render_phase(name: str, **values: Any) -> str:
    return template(f"planning/{name}.j2").render(**values).strip()


def ended_actions(state: PlanningState) -> list[Action]:
    return [a for a in state.plan.actions if a.status in ("done", "failed", "skipped")] if state.plan else []

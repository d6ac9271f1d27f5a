"""The phase requests of SPEC 10, rendered from `prompts/templates/planning/*.j2`.

Each starts with its marker line exactly as SPEC 10 writes it; the replay model keys
planning scripts on these markers, and a model reading a long history finds its place
by them.
"""

from __future__ import annotations

from typing import Any

from coding_agent.agent.planning.checklist import checklist_lines, position
from coding_agent.agent.planning.models import Action, PlanningState
from coding_agent.agent.planning.scan import DiffScan
from coding_agent.config import PlanningConfig
from coding_agent.prompts.prompting import template

__all__ = ["marker", "render_instructions", "phase_request", "final_comment", "verification_outcome"]


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


def phase_request(state: PlanningState, settings: PlanningConfig, native: bool, scan: DiffScan | None) -> str:
    """The request that opens the current phase (or action); `scan` for verification."""
    common: dict[str, Any] = {"native": native, "max_steps": settings.max_steps_per_action}
    plan = state.plan
    if state.phase == "planning" or plan is None:
        return render_phase("planning", marker=marker(state), max_actions=settings.max_actions, **common)
    pending = plan.pending()
    if state.phase == "execution":
        return render_phase("execution", marker=marker(state), action=state.current(), **common)
    criteria = plan.goal.success_criteria
    if state.phase == "reflection":
        reason = state.pending_reflection or "interval"
        return render_phase(
            "reflection", marker=marker(state, reason), reason=reason, criteria=criteria,
            ended=ended_actions(state), pending=pending, **common,
        )
    if state.phase == "revision":
        last = state.reflections[-1] if state.reflections else {}
        kept = len([a for a in plan.counted() if a.status != "pending"])
        return render_phase(
            "revision", marker=marker(state, max_revisions=settings.revision.max_revisions),
            reason=last.get("evaluation") or "the reflection asked for it",
            ended=ended_actions(state), pending=pending, room=settings.max_actions - kept, **common,
        )
    if state.phase == "verification":
        scan = scan or DiffScan([], [])
        rounds = settings.verification.max_rounds
        return render_phase(
            "verification", marker=marker(state, max_rounds=rounds), criteria=criteria, changed=scan.changed,
            placeholders=scan.placeholders, rounds_left=state.verification_round < rounds,
            room=settings.max_actions - len(plan.counted()), **common,
        )
    return render_phase(
        "completion", marker=marker(state), checklist=checklist_lines(state, settings.max_steps_per_action),
        outcome=verification_outcome(state), **common,
    )


def verification_outcome(state: PlanningState) -> str:
    result = state.verification
    if result is None:
        return "not run"
    if result["verification_passed"]:
        return "passed"
    return f"failed ({'; '.join(result['issues_found']) or 'no details'})"


def final_comment(state: PlanningState, comment: str) -> str:
    """The model's final comment, headed by a failed verification's issues, with the
    host's line of actions done/total, revisions and outcome (SPEC 10.1 completion)."""
    done, total = position(state)
    result = state.verification
    parts = []
    if result is not None and not result["verification_passed"]:
        issues = result["issues_found"] or ["(no details)"]
        parts.append("**Verification failed:**\n" + "\n".join(f"- {issue}" for issue in issues))
    parts.append(comment.strip() or "Done.")
    parts.append(
        f"---\nActions: {done}/{total} done · Revisions: {state.revision_count} · Verification: {verification_outcome(state)}"
    )
    return "\n\n".join(parts)

"""The phase driver (SPEC 10.1): planning mode as a `LoopPolicy` of the section-4 loop.

The loop keeps what both modes share (one history, one protocol, the checkpoints, the
limits, tool calls, the correction rule and its five-failure cap, the loop guard); this
class only decides what the next request asks for and what a reply means in the
current phase. `parse` is pure and `accept` applies: a reply saved with a pause is
parsed again on resume and applied once. After a phase reply is applied the next phase
request is added at once, so a saved history never ends with a reply already applied.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from coding_agent.agent.planning.checklist import checklist_lines, headline, position
from coding_agent.agent.planning.models import Action, Phase, PlanningState
from coding_agent.agent.planning.prompts import ended_actions, marker, render_phase
from coding_agent.agent.planning.replies import PHASE_TOOLS, PhaseReply, find_phase_reply
from coding_agent.agent.planning.scan import scan_workspace
from coding_agent.agent.planning.state import dump_state
from coding_agent.agent.planning import validation
from coding_agent.agent.progress import ProgressComment
from coding_agent.config import PlanningConfig
from coding_agent.llm.base import LLMClient
from coding_agent.llm.protocols import Decision, JsonTextProtocol, ReplyProtocol
from coding_agent.llm.types import LLMReply, ToolSpec
from coding_agent.tools.types import ToolResult

__all__ = ["PlanningPolicy"]

log = logging.getLogger(__name__)

_COMMENT_PREFIXES = ("[New Comment from @", "[New Comments Detected]:")
_TOOL_NAMES = {"planning": "submit_plan", "reflection": "submit_reflection", "revision": "submit_revision", "verification": "submit_verification"}
_JSON_SHAPES = {
    "planning": '{"phase": "planning", "goal_understanding": {...}, "task_decomposition": {...}, "action_plan": {"actions": [...]}}',
    "reflection": '{"phase": "reflection", "status": "...", "evaluation": "...", "issues_identified": [], "plan_revision_needed": false}',
    "revision": '{"phase": "revision", "reason": "...", "actions": [...]}',
    "verification": '{"phase": "verification", "verification_passed": true, "issues_found": [], "additional_actions": []}',
}


@dataclass(frozen=True)
class _Effect:
    """What an accepted reply does to the planning state (applied by `accept`)."""

    kind: str
    payload: Any
    call_id: str | None = None
    call_name: str = ""


class PlanningPolicy:
    """One planned run's phases. `steps` reads the run's step count (for the checklist)."""

    def __init__(
        self,
        settings: PlanningConfig,
        protocol: ReplyProtocol,
        workspace: Path,
        progress: ProgressComment | None,
        post_comment: Callable[[str], Awaitable[None]],
        steps: Callable[[], int],
        state: PlanningState | None = None,
        git_timeout: float = 60,
    ) -> None:
        self.settings = settings
        self.protocol = protocol
        self.native = protocol.uses_native_tools
        self.state = state or PlanningState()
        self._workspace = workspace
        self._progress = progress
        self._post_comment = post_comment
        self._steps = steps
        self._git_timeout = git_timeout
        self._effect: _Effect | None = None
        self._json = JsonTextProtocol()
        self.final_label = ""

    # -- LoopPolicy ------------------------------------------------------------------

    def prepare(self, llm: LLMClient, tools: list[ToolSpec]) -> None:
        self.protocol.prepare(llm, [*tools, *PHASE_TOOLS] if self.native else tools)

    async def before_request(self, llm: LLMClient) -> None:
        state = self.state
        self._notice_comments(llm)
        cap = self.settings.max_steps_per_action
        if state.phase == "execution" and state.prompt_sent and state.action_step >= cap:
            log.info("planning: action %s reached its step cap (%d)", state.current().id if state.current() else "?", cap)
            self._end_action("failed", f"step cap of {cap} reached")
        await self._send_prompt(llm)
        state.action_step += 1
        await self._show()

    def parse(self, reply: LLMReply) -> Decision:
        self._effect = None
        phase = self.state.phase
        found = find_phase_reply(reply, self.native)
        reads_text_as_json = self.native and not reply.tool_calls and phase in _TOOL_NAMES
        if found is None and reads_text_as_json:
            found = find_phase_reply(reply, native=False)
        if found is not None:
            return self._phase_reply(found)
        if phase in ("reflection", "revision"):
            return _error(f"no tools and no other reply in the {phase} phase: {self._shape(phase)}")
        step = self._json.parse(reply) if reads_text_as_json else self.protocol.parse(reply)
        if step.error is not None:
            return step
        if phase == "execution":
            return self._execution_step(reply, step)
        if phase == "completion":
            if step.actions or not step.done:
                return _error("no tools in the completion phase: finish with `done` and the final comment")
            self._effect = _Effect("complete", step.comment)
            return step
        # planning or verification: tool steps within the cap; `done` ends the run only in planning
        if step.done and phase == "verification":
            return _error(f"finish verification first: {self._shape(phase)}")
        if step.actions and self.state.action_step >= self.settings.max_steps_per_action:
            return _error(f"the {phase} phase has used its {self.settings.max_steps_per_action} tool steps: {self._shape(phase)}")
        return step

    async def accept(self, llm: LLMClient, decision: Decision) -> Decision:
        effect, self._effect = self._effect, None
        if effect is None:
            return decision
        if effect.call_id is not None:  # a native phase call is answered, so the history pairs
            llm.send_tool_result(effect.call_id, effect.call_name, "Accepted.")
        self._notice_comments(llm)
        decision = await self._apply(effect, decision)
        if not decision.done:
            await self._send_prompt(llm)
        await self._show(force=decision.done)
        return decision

    def send_correction(self, llm: LLMClient, reply: LLMReply, error: str) -> None:
        text = f"Your last reply could not be used: {error}. Nothing in it was run."
        if self.native and reply.tool_calls:
            for call in reply.tool_calls:  # every call is answered, so strict servers accept the history
                llm.send_tool_result(call.id, call.name, text)
            llm.send_user_message(text)
            return
        llm.send_user_message(text if self.native else f"{text}\n{self._json_reminder()}")

    def after_tool(self, name: str, result: ToolResult) -> None:
        return None

    def describe(self) -> str:
        done, total = position(self.state)
        current = self.state.current()
        text = f"Actions: {done}/{total} · Phase: {self.state.phase}"
        if current is not None and current.status == "running":
            text += f" · Current action: {current.id}"
        return text

    # -- state for a pause -----------------------------------------------------------

    def get_state(self) -> dict[str, Any]:
        if self._progress is not None:
            self.state.progress_comment_id = self._progress.comment_id
        return dump_state(self.state)

    # -- reading replies -------------------------------------------------------------

    def _shape(self, phase: str) -> str:
        if self.native:
            return f"call `{_TOOL_NAMES[phase]}`"
        return f"reply with {_JSON_SHAPES[phase]}"

    def _json_reminder(self) -> str:
        phase = self.state.phase
        if phase in _JSON_SHAPES:
            return f"[{phase}] Answer with one JSON object: {_JSON_SHAPES[phase]}."
        if phase == "execution":
            current = self.state.current()
            ident = current.id if current else "?"
            return (
                'Answer with one JSON object: the next {"comment": ..., "command": {...}}, or '
                f'{{"action_done": {{"id": "{ident}", "status": "done", "summary": "..."}}}}.'
            )
        return 'Answer with one JSON object: {"done": true, "comment": "<the final comment>"}.'

    def _phase_reply(self, found: PhaseReply) -> Decision:
        state = self.state
        if found.problem is not None:
            return _error(found.problem)
        expected = "action_done" if state.phase == "execution" else state.phase
        if found.kind != expected:
            what = "action_done" if found.kind == "action_done" else f"a {found.kind} reply"
            wanted = "action_done or a tool step" if expected == "action_done" else self._shape(expected) if expected in _TOOL_NAMES else "finish with `done`"
            return _error(f"{what} is not expected in the {state.phase} phase: {wanted}")
        data = found.data
        plan = state.plan
        limit = self.settings.max_actions
        kept = len([a for a in plan.counted() if a.status != "pending"]) if plan else 0
        taken = state.all_ids()
        if found.kind == "planning":
            result, problems = validation.read_plan(data, limit)
        elif found.kind == "action_done":
            current = state.current()
            result, problems = validation.read_action_done(data, current.id if current else "")
        elif found.kind == "reflection":
            result, problems = validation.read_reflection(data)
        elif found.kind == "revision":
            result, problems = validation.read_revision(data, taken, kept, limit)
        else:
            result, problems = validation.read_verification(data, taken, len(plan.counted()) if plan else 0, limit)
        if problems:
            return _error("; ".join(problems))
        name = "action_done" if found.kind == "action_done" else _TOOL_NAMES[found.kind]
        self._effect = _Effect(found.kind, result, found.call_id, name)
        comment = found.comment
        if not comment and found.kind == "action_done" and isinstance(data.get("action_done"), dict):
            comment = data["action_done"].get("comment") or ""
        return Decision(comment=comment if isinstance(comment, str) else "", actions=(), done=False)

    def _execution_step(self, reply: LLMReply, step: Decision) -> Decision:
        current = self.state.current()
        if self.native and not reply.tool_calls and step.done:  # plain text ends the action as done
            self._effect = _Effect("action_done", validation.ActionDone(current.id if current else "", "done", step.comment))
            return Decision(comment=step.comment, actions=(), done=False)
        if step.done:  # `done` ends execution: the pending actions are skipped
            self._effect = _Effect("finish_execution", step.comment)
            return Decision(comment=step.comment, actions=step.actions, done=False)
        return step

    # -- applying replies ------------------------------------------------------------

    async def _apply(self, effect: _Effect, decision: Decision) -> Decision:
        state = self.state
        if effect.kind == "planning":
            state.plan = effect.payload
            log.info("planning: plan accepted with %d actions", len(state.plan.actions))
            await self._post_checklist()
            self._boundary()
        elif effect.kind == "action_done":
            self._end_action(effect.payload.status, effect.payload.summary)
        elif effect.kind == "finish_execution":
            self._end_action("done", effect.payload, boundary=False)
            for action in state.plan.pending() if state.plan else []:
                action.status = "skipped"
            self._boundary()
        elif effect.kind == "reflection":
            self._reflected(effect.payload)
        elif effect.kind == "revision":
            await self._revise(effect.payload)
        elif effect.kind == "verification":
            await self._verified(effect.payload)
        elif effect.kind == "complete":
            return Decision(comment=self._final_comment(effect.payload), actions=(), done=True)
        return decision

    def _end_action(self, status: str, summary: str, boundary: bool = True) -> None:
        state = self.state
        current = state.current()
        if current is not None and current.status == "running":
            current.status = status  # type: ignore[assignment]
            current.summary = summary
            state.actions_since_reflection += 1
        reflection = self.settings.reflection
        if status == "failed" and reflection.trigger_on_error:
            state.pending_reflection = "error"
        elif reflection.trigger_interval and state.actions_since_reflection >= reflection.trigger_interval:
            state.pending_reflection = state.pending_reflection or "interval"
        if boundary:
            self._boundary()

    def _reflected(self, verdict: dict[str, Any]) -> None:
        state = self.state
        state.reflections.append({"trigger": state.pending_reflection, **verdict})
        state.actions_since_reflection = 0
        state.pending_reflection = None
        if verdict["plan_revision_needed"]:
            if state.revision_count < self.settings.revision.max_revisions:
                self._enter("revision")
                return
            log.info("planning: a revision was wanted beyond max_revisions; noted only")
        self._boundary()

    async def _revise(self, actions: list[Action]) -> None:
        state = self.state
        state.revision_count += 1
        for action in state.plan.pending() if state.plan else []:
            action.status = "dropped"
            action.dropped_in = state.revision_count
        if state.plan is not None:
            state.plan.actions.extend(actions)
        await self._post_checklist()
        self._boundary()

    async def _verified(self, result: dict[str, Any]) -> None:
        state = self.state
        additions: list[Action] = result.pop("additional_actions")
        state.verification = result
        rounds_left = state.verification_round < self.settings.verification.max_rounds
        if not result["verification_passed"] and additions and rounds_left and state.plan is not None:
            state.plan.actions.extend(additions)
            await self._post_checklist()
            self._boundary()
            return
        self._enter("completion")

    def _boundary(self) -> None:
        """After an action or a phase reply: reflect, run the next action, verify or complete."""
        state = self.state
        pending = state.plan.pending() if state.plan is not None else []
        if pending:
            if self.settings.reflection.enabled and state.pending_reflection:
                self._enter("reflection")
                return
            state.pending_reflection = None if not self.settings.reflection.enabled else state.pending_reflection
            state.action_index = state.plan.actions.index(pending[0])  # type: ignore[union-attr]
            pending[0].status = "running"
            self._enter("execution")
            return
        state.pending_reflection = None
        verification = self.settings.verification
        if verification.enabled and state.verification_round < verification.max_rounds:
            state.verification_round += 1
            self._enter("verification")
        else:
            self._enter("completion")

    def _enter(self, phase: Phase) -> None:
        state = self.state
        state.phase = phase
        state.prompt_sent = False
        state.action_step = 0
        if phase != "execution":
            state.action_index = -1

    # -- what the model is sent ------------------------------------------------------

    async def _send_prompt(self, llm: LLMClient) -> None:
        state = self.state
        if state.prompt_sent:
            return
        llm.send_user_message(await self._prompt())
        state.prompt_sent = True
        state.seen_messages = len(llm.messages)

    async def _prompt(self) -> str:
        state = self.state
        settings = self.settings
        common: dict[str, Any] = {"native": self.native, "max_steps": settings.max_steps_per_action}
        plan = state.plan
        if state.phase == "planning":
            return render_phase("planning", marker=marker(state), max_actions=settings.max_actions, **common)
        assert plan is not None
        pending = plan.pending()
        if state.phase == "execution":
            return render_phase("execution", marker=marker(state), action=state.current(), **common)
        if state.phase == "reflection":
            reason = state.pending_reflection or "interval"
            return render_phase(
                "reflection", marker=marker(state, reason), reason=reason, criteria=plan.goal.success_criteria,
                ended=ended_actions(state), pending=pending, **common,
            )
        if state.phase == "revision":
            last = state.reflections[-1] if state.reflections else {}
            reason = last.get("evaluation") or "the reflection asked for it"
            kept = len([a for a in plan.counted() if a.status != "pending"])
            return render_phase(
                "revision", marker=marker(state, max_revisions=settings.revision.max_revisions), reason=reason,
                ended=ended_actions(state), pending=pending, room=settings.max_actions - kept, **common,
            )
        if state.phase == "verification":
            scan = await scan_workspace(self._workspace, self._git_timeout)
            rounds = settings.verification.max_rounds
            return render_phase(
                "verification", marker=marker(state, max_rounds=rounds), criteria=plan.goal.success_criteria,
                changed=scan.changed, placeholders=scan.placeholders, rounds_left=state.verification_round < rounds,
                room=settings.max_actions - len(plan.counted()), **common,
            )
        return render_phase(
            "completion", marker=marker(state), checklist=checklist_lines(state, settings.max_steps_per_action),
            outcome=self._verification_outcome(), **common,
        )

    def _verification_outcome(self) -> str:
        result = self.state.verification
        if result is None:
            return "not run"
        if result["verification_passed"]:
            return "passed"
        issues = "; ".join(result["issues_found"]) or "no details"
        return f"failed ({issues})"

    def _final_comment(self, comment: str) -> str:
        state = self.state
        done, total = position(state)
        result = state.verification
        failed = result is not None and not result["verification_passed"]
        self.final_label = "completed — verification failed" if failed else "completed"
        parts = []
        if failed:
            parts.append("**Verification failed:**\n" + "\n".join(f"- {issue}" for issue in result["issues_found"] or ["(no details)"]))  # type: ignore[index]
        parts.append(comment.strip() or "Done.")
        parts.append(
            f"---\nActions: {done}/{total} done · Revisions: {state.revision_count} · Verification: {self._verification_outcome()}"
        )
        return "\n\n".join(parts)

    def _notice_comments(self, llm: LLMClient) -> None:
        """New comments in the history since the last look: in execution they bring a
        reflection at the next action boundary (SPEC 10.4)."""
        state = self.state
        start = min(state.seen_messages, len(llm.messages))
        arrived = any(
            message.get("role") == "user" and str(message.get("content") or "").startswith(_COMMENT_PREFIXES)
            for message in llm.messages[start:]
        )
        state.seen_messages = len(llm.messages)
        if arrived and state.phase == "execution" and self.settings.reflection.enabled:
            state.pending_reflection = state.pending_reflection or "comment"

    # -- the progress comment --------------------------------------------------------

    def _phase_label(self) -> str:
        return self.final_label or self.state.phase

    async def _show(self, force: bool = False) -> None:
        """Update the checklist; `force` writes at once (a new plan, a revision, additions)."""
        if self._progress is None:
            return
        self._progress.plan_headline = headline(self.state, self._phase_label(), self._steps())
        self._progress.plan_lines = checklist_lines(self.state, self.settings.max_steps_per_action)
        await (self._progress.flush() if force else self._progress.refresh())

    async def _post_checklist(self) -> None:
        """Without a progress comment the checklist is posted after planning and each
        revision (SPEC 10.5); with one it is shown there at once."""
        if self._progress is not None:
            await self._show(force=True)
            return
        lines = [headline(self.state, self._phase_label(), self._steps()), "", *checklist_lines(self.state, self.settings.max_steps_per_action)]
        await self._post_comment("\n".join(lines))

    async def finish(self) -> None:
        """The checklist's final state (posted when there is no progress comment)."""
        if self._progress is None and self.state.plan is not None:
            await self._post_checklist()
        elif self._progress is not None:
            await self._show()


def _error(text: str) -> Decision:
    return Decision(comment="", actions=(), done=False, error=text)

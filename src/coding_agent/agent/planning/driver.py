"""The phase driver (SPEC 10.1): planning mode as a `LoopPolicy` of the section-4 loop.

The loop keeps what both modes share (one history, one protocol, the checkpoints, the
limits, tool calls, the correction rule and its five-failure cap, the loop guard); this
class only decides what the next request asks for and what a reply means in the
current phase. (About 360 lines on purpose: the phase transitions are one state machine,
read best in one place; reading, validation, prompts and the checklist live beside it.)
`parse` is pure and `accept` applies: a reply saved with a pause is
parsed again on resume and applied once. After a phase reply is applied the next phase
request is added at once, so a saved history never ends with a reply already applied.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from coding_agent.agent.markdown import inert_markdown
from coding_agent.agent.planning.checklist import Shown, checklist_lines, headline, position
from coding_agent.agent.planning.models import Action, ActionStatus, Phase, PlanningState
from coding_agent.agent.planning.prompts import final_comment, phase_request
from coding_agent.agent.planning.reading import TOOL_NAMES, json_reminder, shape, validate
from coding_agent.agent.planning.replies import PHASE_TOOLS, PhaseReply, find_phase_reply
from coding_agent.agent.planning.scan import scan_workspace
from coding_agent.agent.planning.state import dump_state
from coding_agent.agent.planning.validation import ActionDone
from coding_agent.agent.progress import ProgressComment
from coding_agent.config import PlanningConfig
from coding_agent.llm.base import LLMClient
from coding_agent.llm.protocols import JsonTextProtocol, ParsedReply, ReplyProtocol
from coding_agent.llm.types import LLMReply, ToolSpec

__all__ = ["PlanningPolicy"]

log = logging.getLogger(__name__)

_COMMENT_PREFIXES = ("[New Comment from @", "[New Comments Detected]:")
@dataclass(frozen=True)
class _Effect:
    """What an accepted reply does to the planning state (applied by `accept`)."""

    kind: str
    payload: Any
    call_id: str | None = None
    call_name: str = ""
    others: tuple[tuple[str, str], ...] = ()  # other native calls of the reply: answered, not run


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
        shown: Shown = inert_markdown,
    ) -> None:
        self.settings = settings
        self.protocol = protocol
        self.state = state or PlanningState()
        self._workspace = workspace
        self._progress = progress
        self._post_comment = post_comment
        self._steps = steps
        self._git_timeout = git_timeout
        self._shown = shown  # the model's words in the checklist on the forge: redacted, inert
        self._effect: _Effect | None = None
        self._prompt_at: int | None = None  # where the last phase request went in the history
        self._json = JsonTextProtocol()
        self.final_label = ""

    @property
    def native(self) -> bool:
        """Whether phase replies are native tool calls (the protocol can fall back to text)."""
        return self.protocol.uses_native_tools

    # -- LoopPolicy ------------------------------------------------------------------

    def prepare(self, llm: LLMClient, tools: list[ToolSpec]) -> None:
        self.protocol.prepare(llm, [*tools, *PHASE_TOOLS] if self.native else tools)

    async def before_request(self, llm: LLMClient) -> None:
        state = self.state
        self._notice_comments(llm)
        cap = self.settings.max_steps_per_action
        if state.phase == "execution" and state.prompt_sent and state.action_step >= cap:
            current = state.current()
            log.info("planning: action %s reached its step cap (%d)", current.id if current else "?", cap)
            self._end_action("failed", f"step cap of {cap} reached")
        await self._send_prompt(llm)
        state.action_step += 1
        await self._show()

    def parse(self, reply: LLMReply) -> ParsedReply:
        self._effect = None
        phase = self.state.phase
        found = find_phase_reply(reply, self.native)
        reads_text_as_json = self.native and not reply.tool_calls and phase in TOOL_NAMES
        if found is None and reads_text_as_json:
            found = find_phase_reply(reply, native=False)
        if found is not None:
            decision = self._phase_reply(found)
            if self._effect is not None and found.call_id is not None:
                others = tuple((call.id, call.name) for call in reply.tool_calls if call.id != found.call_id)
                self._effect = replace(self._effect, others=others)
            return decision
        if phase in ("reflection", "revision"):
            return _error(f"no tools and no other reply in the {phase} phase: {shape(phase, self.native)}")
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
            return _error(f"finish verification first: {shape(phase, self.native)}")
        if step.actions and self.state.action_step >= self.settings.max_steps_per_action:
            steps = self.settings.max_steps_per_action
            return _error(f"the {phase} phase has used its {steps} tool steps: {shape(phase, self.native)}")
        return step

    async def accept(self, llm: LLMClient, decision: ParsedReply) -> ParsedReply:
        effect, self._effect = self._effect, None
        if effect is None:
            return decision
        if effect.call_id is not None:  # a native phase call is answered, so the history pairs
            llm.send_tool_result(effect.call_id, effect.call_name, "Accepted.")
            for call_id, name in effect.others:
                llm.send_tool_result(
                    call_id, name, f"Not run: a {effect.call_name} reply ends the step; call tools in a reply of their own."
                )
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
            return
        llm.send_user_message(text if self.native else f"{text}\n{json_reminder(self.state)}")

    def fall_back_to_text(self, llm: LLMClient) -> None:
        """JSON in text from now on; the phase request just sent, unanswered, asked for
        native phase tools: it is taken back and sent again in its JSON-text form."""
        self.protocol = JsonTextProtocol()
        self.protocol.prepare(llm, [])
        state = self.state
        if state.prompt_sent and self._prompt_at == len(llm.messages) - 1:
            llm.messages.pop()
            state.prompt_sent = False
            state.seen_messages = len(llm.messages)
            state.action_step = max(0, state.action_step - 1)

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

    def _phase_reply(self, found: PhaseReply) -> ParsedReply:
        state = self.state
        if found.problem is not None:
            return _error(found.problem)
        expected = "action_done" if state.phase == "execution" else state.phase
        if found.kind != expected:
            what = "action_done" if found.kind == "action_done" else f"a {found.kind} reply"
            wanted = (
                "action_done or a tool step"
                if expected == "action_done"
                else shape(expected, self.native) if expected in TOOL_NAMES else "finish with `done`"
            )
            return _error(f"{what} is not expected in the {state.phase} phase: {wanted}")
        data = found.data
        result, problems = validate(found, state, self.settings.max_actions)
        if problems:
            return _error("; ".join(problems))
        name = "action_done" if found.kind == "action_done" else TOOL_NAMES[found.kind]
        self._effect = _Effect(found.kind, result, found.call_id, name)
        comment = found.comment
        if not comment and found.kind == "action_done" and isinstance(data.get("action_done"), dict):
            comment = data["action_done"].get("comment") or ""
        return ParsedReply(comment=comment if isinstance(comment, str) else "", actions=(), done=False)

    def _execution_step(self, reply: LLMReply, step: ParsedReply) -> ParsedReply:
        current = self.state.current()
        if self.native and not reply.tool_calls and step.done:  # plain text ends the action as done
            self._effect = _Effect("action_done", ActionDone(current.id if current else "", "done", step.comment))
            return ParsedReply(comment=step.comment, actions=(), done=False)
        if step.done:  # `done` ends execution: the pending actions are skipped
            self._effect = _Effect("finish_execution", step.comment)
            return ParsedReply(comment=step.comment, actions=step.actions, done=False)
        return step

    # -- applying replies ------------------------------------------------------------

    async def _apply(self, effect: _Effect, decision: ParsedReply) -> ParsedReply:
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
            await self._reflected(effect.payload)
        elif effect.kind == "revision":
            await self._revise(effect.payload)
        elif effect.kind == "verification":
            await self._verified(effect.payload)
        elif effect.kind == "complete":
            return ParsedReply(comment=self._final_comment(effect.payload), actions=(), done=True)
        return decision

    def _end_action(self, status: ActionStatus, summary: str, boundary: bool = True) -> None:
        state = self.state
        current = state.current()
        if current is not None and current.status == "running":
            current.status = status
            current.summary = summary
            state.actions_since_reflection += 1
        reflection = self.settings.reflection
        if status == "failed" and reflection.trigger_on_error:
            state.pending_reflection = "error"
        elif reflection.trigger_interval and state.actions_since_reflection >= reflection.trigger_interval:
            state.pending_reflection = state.pending_reflection or "interval"
        if boundary:
            self._boundary()

    async def _reflected(self, verdict: dict[str, Any]) -> None:
        state = self.state
        state.reflections.append({"trigger": state.pending_reflection, **verdict})
        state.actions_since_reflection = 0
        state.pending_reflection = None
        if verdict["plan_revision_needed"]:
            if state.revision_count < self.settings.revision.max_revisions:
                self._enter("revision")
                return
            log.info("planning: a revision was wanted beyond max_revisions; noted only")
            limit = self.settings.revision.max_revisions
            await self._post_comment(
                f"Reflection asked for a plan revision, but the limit of {limit} revision(s) is reached; the plan stays."
            )
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
        plan = state.plan
        pending = plan.pending() if plan is not None else []
        if plan is not None and pending:
            if self.settings.reflection.enabled and state.pending_reflection:
                self._enter("reflection")
                return
            state.pending_reflection = None
            state.action_index = plan.actions.index(pending[0])
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
        self._prompt_at = len(llm.messages) - 1
        state.prompt_sent = True
        state.seen_messages = len(llm.messages)

    async def _prompt(self) -> str:
        scan = None
        if self.state.phase == "verification":
            scan = await scan_workspace(self._workspace, self._git_timeout)
        return phase_request(self.state, self.settings, self.native, scan)

    def _final_comment(self, comment: str) -> str:
        failed = self.state.verification is not None and not self.state.verification["verification_passed"]
        self.final_label = "completed — verification failed" if failed else "completed"
        return final_comment(self.state, comment)

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
        self._progress.plan_headline = headline(self.state, self._phase_label(), self._steps(), self._shown)
        self._progress.plan_lines = checklist_lines(self.state, self.settings.max_steps_per_action, self._shown)
        await (self._progress.flush() if force else self._progress.refresh())

    async def _post_checklist(self) -> None:
        """Without a progress comment the checklist is posted after planning and each
        revision (SPEC 10.5); with one it is shown there at once."""
        if self._progress is not None:
            await self._show(force=True)
            return
        top = headline(self.state, self._phase_label(), self._steps(), self._shown)
        lines = [top, "", *checklist_lines(self.state, self.settings.max_steps_per_action, self._shown)]
        await self._post_comment("\n".join(lines))

    async def finish(self) -> None:
        """The checklist's final state (posted when there is no progress comment)."""
        if self._progress is None and self.state.plan is not None:
            await self._post_checklist()
        elif self._progress is not None:
            await self._show()


def _error(text: str) -> ParsedReply:
    return ParsedReply(comment="", actions=(), done=False, error=text)

"""Carrying a run on (SPEC 8.3): resumed after a pause, or taken over after its worker died.

A continued run starts from its saved state: the history goes back into the model
client, the reply it had received but not acted on is acted on without asking again, and
an outcome a dead worker had already recorded is published instead of working again.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from coding_agent.agent.loop import LoopOutcome
from coding_agent.agent.steering.signals import RunStopped
from coding_agent.agent.steering.state import RunState
from coding_agent.context.storage import ContextStorage, RunContextFiles
from coding_agent.domain.runs import PausedWork, RunMarks, RunRecord
from coding_agent.llm.base import LLMClient
from coding_agent.llm.types import LLMReply, TokenUsage, ToolCallRequest

__all__ = ["Continuation", "pending_reply"]


@dataclass(frozen=True)
class Continuation:
    """An existing run to carry on: resumed after a pause, or taken over after a crash.

    `state` is None when nothing is left to do but publish an outcome the run had
    already recorded (`marks.final_status`).
    """

    run: RunRecord
    state: RunState | None
    marks: RunMarks
    workspace: Path

    def reopen(self, storage: ContextStorage) -> tuple[RunContextFiles, Path] | None:
        """The run's context files, back in `running/`, and its workspace; None if gone."""
        files = storage.reopen(self.run.uuid, self.state.messages if self.state is not None else None)
        return (files, self.workspace) if files is not None else None

    def paused_work(self) -> PausedWork | None:
        """The commit on the task's branch the run's files are at (a pause's WIP commit)."""
        state = self.state
        if state is None or not state.branch or not state.commit:
            return None
        return PausedWork(state.branch, state.commit)

    def restore(self, llm: LLMClient) -> bool:
        """Load the saved history into `llm`; False when there is none to load."""
        if self.state is None:
            return False
        llm.messages[:] = [dict(message) for message in self.state.messages]
        llm.usage = TokenUsage(self.state.prompt_tokens, self.state.completion_tokens)
        return True

    def recorded_outcome(self, steps: int) -> LoopOutcome | None:
        """The outcome a previous worker of this run recorded before dying, if any.

        A recorded stop is re-raised, so the runner finishes it as a stop.
        """
        if self.marks.final_status is None:
            return None
        if self.marks.final_status == "stopped":
            raise RunStopped("operator")
        status = "done" if self.marks.final_status == "done" else "failed"
        return LoopOutcome(status, self.marks.final_body or "", steps)


def pending_reply(messages: list[dict[str, Any]]) -> LLMReply | None:
    """The last reply, when the history ends with it: received, but not acted on yet."""
    if not messages or messages[-1].get("role") != "assistant":
        return None
    last = messages[-1]
    calls = []
    for call in last.get("tool_calls") or []:
        function = call.get("function") or {}
        arguments = function.get("arguments")
        calls.append(
            ToolCallRequest(
                id=str(call.get("id", "")),
                name=str(function.get("name", "")),
                arguments=arguments if isinstance(arguments, dict) else {},
            )
        )
    return LLMReply(content=str(last.get("content") or ""), tool_calls=tuple(calls))

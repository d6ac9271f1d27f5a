"""The run's final comment, posted at most once per run, ever, and the reporter around it.

The outcome is recorded in the state store before it is published, so a worker taking a
run over publishes the same words; the store's mark says whether the comment is out; a
takeover whose predecessor died between posting and marking looks on the forge first.
Step comments fold into the progress comment when it is enabled.
"""

from __future__ import annotations

import logging
from typing import Protocol

from coding_agent.agent.loop import LoopOutcome
from coding_agent.agent.steering.comments import CommentDetector
from coding_agent.agent.steering.scope import RunScope
from coding_agent.errors import AgentError

__all__ = ["IssueWriter", "FinalComment", "ControlReporter"]

log = logging.getLogger(__name__)


class IssueWriter(Protocol):
    """The runner's reporter: posts comments on the task, redacted."""

    async def step_comment(self, text: str) -> None: ...

    async def final_comment(self, text: str) -> None: ...


class FinalComment:
    def __init__(self, scope: RunScope, detector: CommentDetector) -> None:
        self._scope = scope
        self._detector = detector

    async def record(self, outcome: LoopOutcome) -> None:
        """Remember the outcome before publishing it: a worker taking over publishes it too."""
        await self._scope.stored(self._scope.store.record_final, self._scope.run_uuid, outcome.status, outcome.comment)

    async def post(self, text: str, inner: IssueWriter) -> None:
        """The run's final comment, at most once: the state store says whether it is out."""
        scope = self._scope
        marks = await scope.stored(scope.store.run_marks, scope.run_uuid)
        if marks.final_posted:
            log.info("%s: run %s already has its final comment", scope.key, scope.run_uuid)
            return
        inherited = scope.continuation is not None and scope.continuation.marks.final_status is not None
        if inherited and await self._already_posted(text):
            log.info("%s: the final comment of run %s was posted before the takeover", scope.key, scope.run_uuid)
        else:
            await inner.final_comment(text)
        await scope.stored(scope.store.mark_final_posted, scope.run_uuid)

    async def _already_posted(self, text: str) -> bool:
        """Did the worker that died post this final comment before it could say so?"""
        scope = self._scope
        expected = scope.redactor.text(text).strip()
        try:
            comments = await scope.source.list_comments(scope.task.key)
        except AgentError as error:
            log.warning("%s: could not look for an earlier final comment: %s", scope.key, error)
            return False
        return any(self._detector.is_bot_comment(c) and c.body.strip() == expected for c in comments)


class ControlReporter:
    """The reporter the loop and the runner use: step comments folded into the progress
    comment (when enabled), and a final comment that is posted once per run, ever."""

    def __init__(self, scope: RunScope, final: FinalComment, inner: IssueWriter) -> None:
        self._scope = scope
        self._final = final
        self._inner = inner

    async def step_comment(self, text: str) -> None:
        progress = self._scope.progress
        if progress is None:
            await self._inner.step_comment(text)
            return
        progress.note_step(text)
        await progress.refresh()

    async def final_comment(self, text: str) -> None:
        await self._final.post(text, self._inner)

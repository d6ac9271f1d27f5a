"""The run's voice on its task: every comment a run posts goes through here, redacted."""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable

from coding_agent.domain.tasks import TaskKey, ThreadRef
from coding_agent.errors import AgentError
from coding_agent.redaction import Redactor
from coding_agent.sources.base import Source

__all__ = ["IssueReporter", "ThreadFinder"]

log = logging.getLogger(__name__)

# Reads the task's conversation and names the review thread that asked for the run (None: top level).
ThreadFinder = Callable[[], Awaitable[str | None]]


class IssueReporter:
    """Posts the run's comments on the task, redacted.

    `thread_id` set: the run was asked from that review thread, so the final comment is
    a reply there (SPEC 7; see `reply_thread.py`). `thread_key`: the PR/MR holding that
    thread when it is not the task itself (a follow-up asked on the PR/MR the agent
    opened for an issue, SPEC 3).

    The thread is known once the run has read its conversation, which a new run does
    right before its first prompt. A run that ends before then (its clone, setup or tool
    servers failed) or never reads it (an outcome recorded by an earlier attempt) has
    the reporter ask `find_thread_with`'s finder when its final comment is due.
    """

    def __init__(self, source: Source, key: TaskKey, redactor: Redactor) -> None:
        self._source = source
        self._key = key
        self._redactor = redactor
        self.thread_id: str | None = None
        self.thread_key: TaskKey | None = None
        self._find_thread: ThreadFinder | None = None

    def answer_in(self, ref: ThreadRef) -> None:
        self.thread_key, self.thread_id = ref.change, ref.thread_id
        self._find_thread = None

    def find_thread_with(self, finder: ThreadFinder) -> None:
        """Until `settle_thread`, the final comment asks `finder` where to go."""
        self._find_thread = finder

    def settle_thread(self, thread_id: str | None) -> None:
        """The run read its conversation: `thread_id` asked for it (None: the top level)."""
        self.thread_id, self._find_thread = thread_id, None

    async def step_comment(self, text: str) -> None:
        await self._source.post_comment(self._key, self._redactor.text(text))

    async def final_comment(self, text: str) -> None:
        if self._find_thread is not None:
            try:
                self.settle_thread(await self._find_thread())
            except AgentError as error:  # where to answer is no reason not to answer
                reason = self._redactor.text(str(error))
                log.warning("%s: the thread that asked for the run is unknown (%s); answering at the top", self._key, reason)
                self.settle_thread(None)
        if self.thread_id is not None:
            await self._source.reply_in_thread(self.thread_key or self._key, self.thread_id, self._redactor.text(text))
            return
        await self._source.post_comment(self._key, self._redactor.text(text))

"""The run's voice on its task: every comment a run posts goes through here, redacted."""

from __future__ import annotations

from coding_agent.domain.tasks import TaskKey, ThreadRef
from coding_agent.redaction import Redactor
from coding_agent.sources.base import Source

__all__ = ["IssueReporter"]


class IssueReporter:
    """Posts the run's comments on the task, redacted.

    `thread_id` set: the run was asked from that review thread, so the final comment is
    a reply there (SPEC 7; see `reply_thread.py`). `thread_key`: the PR/MR holding that
    thread when it is not the task itself (a follow-up asked on the PR/MR the agent
    opened for an issue, SPEC 3).
    """

    def __init__(self, source: Source, key: TaskKey, redactor: Redactor) -> None:
        self._source = source
        self._key = key
        self._redactor = redactor
        self.thread_id: str | None = None
        self.thread_key: TaskKey | None = None

    def answer_in(self, ref: ThreadRef) -> None:
        self.thread_key, self.thread_id = ref.change, ref.thread_id

    async def step_comment(self, text: str) -> None:
        await self._source.post_comment(self._key, self._redactor.text(text))

    async def final_comment(self, text: str) -> None:
        if self.thread_id is not None:
            await self._source.reply_in_thread(self.thread_key or self._key, self.thread_id, self._redactor.text(text))
            return
        await self._source.post_comment(self._key, self._redactor.text(text))

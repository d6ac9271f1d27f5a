"""The run's voice on its task: every comment a run posts goes through here, redacted,
and this is the one place that decides where the run answers (SPEC 7).

The rule: on a PR/MR task, look at every comment by a trusted person (write access,
not the bot itself), top-level and inside review threads / MR discussions. The newest
of them is the request this run answers. If it sits in a thread, the run was started
from that thread, and the final reply goes there; otherwise it goes to the PR/MR's
top-level comments, as for issues. Issues have no threads. Comments of people without
write access never decide where the agent speaks: they cannot start a run either.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable
from datetime import datetime

from coding_agent.agent.trust import Conversation, read_conversation
from coding_agent.domain.tasks import Comment, Task, TaskKey, Thread, ThreadRef
from coding_agent.errors import AgentError
from coding_agent.redaction import Redactor
from coding_agent.sources.base import Source

__all__ = ["IssueReporter", "request_thread"]

log = logging.getLogger(__name__)


def request_thread(
    task: Task,
    comments: Iterable[Comment],
    threads: Iterable[Thread],
    is_trusted: Callable[[str], bool],
    bot_name: str | None,
) -> str | None:
    """The id of the thread holding the newest trusted request, or None for a top-level one."""
    if not task.key.is_change:
        return None
    bot = (bot_name or "").lower()

    def asks(comment: Comment) -> bool:
        return comment.author.lower() != bot and is_trusted(comment.author)

    candidates: list[tuple[datetime, int, str | None]] = [(c.created_at, 0, None) for c in comments if asks(c)]
    candidates += [(c.created_at, 1, thread.id) for thread in threads for c in thread.comments if asks(c)]
    if not candidates:
        return None
    # On equal timestamps a thread comment wins: it is the more specific request.
    _, _, thread_id = max(candidates, key=lambda item: (item[0], item[1]))
    return thread_id


class IssueReporter:
    """Posts the run's comments on the task, redacted; the final comment where the run answers.

    `reply_to`: the review thread that asked for the run, when the run knows it from the
    start (a follow-up asked on the PR/MR the agent opened for an issue, SPEC 3, or a
    continued run). Otherwise, on a PR/MR, the thread is read from the conversation,
    which a new run does right before its first prompt (`settle`). A run that ends before
    then (its clone, setup or tool servers failed) or never reads it (an outcome recorded
    by an earlier attempt) reads the conversation when its final comment is due.
    """

    def __init__(
        self, source: Source, task: Task, redactor: Redactor, reply_to: ThreadRef | None, writers: frozenset[str]
    ) -> None:
        """`writers`: whom the claim found to have write access (for reading the conversation)."""
        self._source = source
        self._task = task
        self._key = task.key
        self._redactor = redactor
        self._writers = writers
        self.thread_key: TaskKey | None = reply_to.change if reply_to is not None else None
        self.thread_id: str | None = reply_to.thread_id if reply_to is not None else None
        self._settled = reply_to is not None or not task.key.is_change

    def settle(self, conversation: Conversation) -> None:
        """The run read its conversation: the newest trusted request says where to answer."""
        if not self._settled:
            self._settle_on(conversation)

    def _settle_on(self, conversation: Conversation) -> None:
        self.thread_id = request_thread(
            self._task, conversation.comments, conversation.threads, conversation.trust, self._source.bot_name
        )
        self._settled = True

    async def step_comment(self, text: str) -> None:
        await self._source.post_comment(self._key, self._redactor.text(text))

    async def final_comment(self, text: str) -> None:
        if not self._settled:
            try:
                self._settle_on(await read_conversation(self._source, self._task, None, self._writers))
            except AgentError as error:  # where to answer is no reason not to answer
                reason = self._redactor.text(str(error))
                log.warning("%s: the thread that asked for the run is unknown (%s); answering at the top", self._key, reason)
                self._settled = True
        if self.thread_id is not None:
            await self._source.reply_in_thread(self.thread_key or self._key, self.thread_id, self._redactor.text(text))
            return
        await self._source.post_comment(self._key, self._redactor.text(text))

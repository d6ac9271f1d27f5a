"""Follow-ups (SPEC 3): a new @mention of the bot on a task it finished starts a new run.

Discovery stays cheap: each source lists done items updated recently (one search / two
listings per scope), and an item whose `updated_at` is the one already examined costs no
request at all. Only a changed item is read: its comments are checked for the newest one
after the bot's last comment that @mentions the bot.

That comment is recorded before anything happens, so it never acts twice:
- from someone without write access: ignored (their text is never an instruction);
- a completion comment ("@bot thanks, done!"): a short acknowledgement, no run;
- otherwise: the claim swaps `done` for `processing`, and the runner starts a new run of
  the same task, which inherits the previous run's summary (its thread memory and its
  final comment, an assistant turn of the conversation).
"""

from __future__ import annotations

import asyncio
import logging
import re
import time
from collections.abc import Callable, Sequence

from sqlalchemy import Float, String
from sqlalchemy.engine import Engine
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column

from coding_agent.context.completion import CompletionDetector
from coding_agent.context.conversation import is_bot
from coding_agent.domain.tasks import Comment, Task
from coding_agent.prompts.notices import Language, notice
from coding_agent.redaction import Redactor
from coding_agent.runtime.intake import Claim
from coding_agent.runtime.state_store import StateStore, TableStore
from coding_agent.sources.base import Source
from coding_agent.sources.lifecycle import lifecycle_labels, transition

__all__ = ["FollowUpRecords", "FollowUpIntake", "find_followup_comment", "mentions"]

log = logging.getLogger(__name__)


class _Base(DeclarativeBase):
    pass


class _Handled(_Base):
    """A comment that already led to a follow-up decision (run, acknowledged or ignored)."""

    __tablename__ = "followup_comments"
    task_key: Mapped[str] = mapped_column(String(300), primary_key=True)
    comment_id: Mapped[str] = mapped_column(String(100), primary_key=True)
    action: Mapped[str] = mapped_column(String(20))
    at: Mapped[float] = mapped_column(Float)


class _Seen(_Base):
    """The `updated_at` at which a done task was last examined: unchanged means nothing new."""

    __tablename__ = "followup_seen"
    task_key: Mapped[str] = mapped_column(String(300), primary_key=True)
    updated_at: Mapped[str] = mapped_column(String(40))


class FollowUpRecords(TableStore):
    """The follow-up tables, beside the state store's, in the same database."""

    def __init__(self, engine: Engine, clock: Callable[[], float] = time.time) -> None:
        super().__init__(engine, _Base.metadata, clock)

    def seen(self, task_key: str, updated_at: str) -> bool:
        with self._session() as session:
            row = session.get(_Seen, task_key)
            return row is not None and row.updated_at == updated_at

    def mark_seen(self, task_key: str, updated_at: str) -> None:
        with self._session() as session:
            row = session.get(_Seen, task_key)
            if row is None:
                session.add(_Seen(task_key=task_key, updated_at=updated_at))
            else:
                row.updated_at = updated_at

    def handled(self, task_key: str, comment_id: str) -> str | None:
        """The action taken on this comment, or None when it is new."""
        with self._session() as session:
            row = session.get(_Handled, (task_key, comment_id))
            return row.action if row is not None else None

    def handle(self, task_key: str, comment_id: str, action: str) -> None:
        with self._session() as session:
            if session.get(_Handled, (task_key, comment_id)) is None:
                session.add(_Handled(task_key=task_key, comment_id=comment_id, action=action, at=self._clock()))


def mentions(text: str, login: str) -> bool:
    """`@login` as a whole mention (not `@login-two`, not an e-mail address)."""
    return re.search(rf"(?<![\w@.])@{re.escape(login)}(?![\w-])", text, re.IGNORECASE) is not None


def find_followup_comment(comments: Sequence[Comment], bot_name: str) -> Comment | None:
    """The newest comment after the bot's last one that @mentions the bot, if any.

    Forges stamp whole seconds, so a comment posted in the same second as the bot's is
    ordered by its place in the listing (oldest first), not by a reversed sort that would
    put the bot's comment after it.
    """
    for comment in reversed(sorted(comments, key=lambda c: c.created_at)):
        if is_bot(comment.author, bot_name):
            return None
        if mentions(comment.body, bot_name):
            return comment
    return None


class FollowUpIntake:
    """Claims follow-ups, as `Intake` claims labelled tasks: lease, fresh re-read, checks, label swap."""

    def __init__(
        self,
        store: StateStore,
        owner: str,
        lease_seconds: float,
        redactor: Redactor,
        language: Language,
        completion_keywords: Sequence[str],
        allow_untrusted: bool,
    ) -> None:
        self._store = store
        self._records = FollowUpRecords(store.engine)
        self._owner = owner
        self._lease_seconds = lease_seconds
        self._redactor = redactor
        self._language = language
        self._is_completion = CompletionDetector(completion_keywords)
        self._allow_untrusted = allow_untrusted

    async def try_claim(self, source: Source, task: Task) -> Claim | None:
        """Claim `task` for a follow-up run, or return None (nothing new, acknowledged, refused)."""
        key = str(task.key)
        if not source.bot_name or await asyncio.to_thread(self._records.seen, key, task.updated_at.isoformat()):
            return None
        if not await asyncio.to_thread(self._store.acquire_lease, key, self._owner, self._lease_seconds):
            return None
        try:
            claim = await self._examine(source, key, source.bot_name, task)
        except BaseException:
            await asyncio.to_thread(self._store.release_lease, key, self._owner)
            raise
        if claim is None:
            await asyncio.to_thread(self._store.release_lease, key, self._owner)
        return claim

    async def _examine(self, source: Source, key: str, bot_name: str, task: Task) -> Claim | None:
        fresh = await source.get_task(task.key)
        if not fresh.has_label(source.labels.done_label):
            return None
        seen_at = fresh.updated_at.isoformat()
        trigger = find_followup_comment(await source.list_comments(task.key), bot_name)
        if trigger is None or await asyncio.to_thread(self._records.handled, key, trigger.id) is not None:
            await asyncio.to_thread(self._records.mark_seen, key, seen_at)
            return None
        if not self._allow_untrusted and not (await source.get_permission(task.key, trigger.author)).can_write:
            log.warning("%s: @mention by %s (no write access) ignored", key, trigger.author)
            await asyncio.to_thread(self._records.handle, key, trigger.id, "ignored")
            await asyncio.to_thread(self._records.mark_seen, key, seen_at)
            return None
        if self._is_completion(trigger.body):
            # Recorded first: a crash right after costs the acknowledgement, never a second one.
            await asyncio.to_thread(self._records.handle, key, trigger.id, "acknowledged")
            await asyncio.to_thread(self._records.mark_seen, key, seen_at)
            text = notice("followup_ack", self._language, user=trigger.author)
            await source.post_comment(task.key, self._redactor.text(text))
            log.info("%s: completion comment %s by %s acknowledged; no new run", key, trigger.id, trigger.author)
            return None
        await asyncio.to_thread(self._records.handle, key, trigger.id, "run")
        present = [label for label in fresh.labels if label in lifecycle_labels(source)]
        await transition(source, task.key, source.labels.processing_label, present)
        log.info("%s: follow-up claimed (comment %s by %s)", key, trigger.id, trigger.author)
        return Claim(task=fresh, requester=trigger.author)

"""New-comment detection (SPEC 8.1, seed 000): comments posted while a run works reach
the model at the next checkpoint, as one user message.

The comment ids known at run start are recorded; at a checkpoint the task's comments
created or edited since the newest one seen (less `LOOK_BACK`) are listed, the unknown
ones that are not the bot's own are formatted in the seed's exact wording and sent. Only
new comments matter (an edit or a deletion is not sent), and asking only for the recent
ones keeps each look as cheap on a discussion of hundreds of comments, the run's own step
comments included, as on a new issue; an unchanged answer is still a 304 (the adapters
revalidate with ETags). A failing listing is logged and the run goes on: steering must
never be the reason a run fails.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Iterable, Sequence
from datetime import UTC, datetime, timedelta
from typing import Any, Protocol

from coding_agent.domain.tasks import Comment, TaskKey, Thread
from coding_agent.prompts.prompting import text
from coding_agent.prompts.untrusted import UntrustedWrapper
from coding_agent.sources.base import Source

__all__ = ["LOOK_BACK", "CommentDetector", "TrustLookup", "format_comment_message", "thread_comments"]

log = logging.getLogger(__name__)

# How far before the newest comment seen a look starts. The forge stamps a comment as it
# is made, and a comment made a moment before another can become visible after it (two
# writes at once, a read replica behind); its id, not its time, says whether it is new.
LOOK_BACK = timedelta(seconds=5)


class TrustLookup(Protocol):
    """Who has write access (the runner's per-run cache of permission lookups), and the
    run's wrapper for the text of those who do not."""

    wrapper: UntrustedWrapper

    async def load(self, source: Source, key: TaskKey, authors: set[str]) -> None: ...

    def __call__(self, author: str) -> bool: ...


def thread_comments(threads: Iterable[Thread]) -> list[Comment]:
    """Every comment of every review thread / MR discussion, flattened."""
    return [comment for thread in threads for comment in thread.comments]


def format_comment_message(comments: Sequence[Comment], bodies: Sequence[str] | None = None) -> str:
    """The user message for new comments, worded exactly as seed 000 section 2.3.6 says.

    `bodies` replaces the comments' own text (e.g. wrapped as untrusted), index by index.
    """
    if not comments:
        return ""
    texts = list(bodies) if bodies is not None else [comment.body for comment in comments]
    items = [
        {"author": comment.author, "created_at": comment.created_at.isoformat(), "text": body}
        for comment, body in zip(comments, texts)
    ]
    return text("new_comments.j2", items=items)


def _utc_now() -> datetime:
    return datetime.now(UTC)


class CommentDetector:
    """Finds comments added to one task since the last look (seed 000's CommentDetectionManager)."""

    def __init__(
        self,
        source: Source,
        key: TaskKey,
        bot_name: str | None,
        enabled: bool,
        trust: TrustLookup | None = None,
    ) -> None:
        self._source = source
        self._key = key
        self._bot = (bot_name or "").casefold()
        self.trust = trust
        self.enabled = enabled and bool(bot_name)
        if enabled and not bot_name:
            log.warning("%s: no bot_name is configured for %s; new-comment detection is off", key, key.forge)
        self.last_comment_ids: set[str] = set()
        self.last_check_time: datetime | None = None
        # The newest comment's time, as the forge stamped it (None: list every comment).
        self.newest: datetime | None = None

    def initialize(self, comments: Iterable[Comment]) -> None:
        """Record the comments that exist at run start (those the task prompt already holds)."""
        if not self.enabled:
            return
        comments = list(comments)
        self.last_comment_ids = {str(comment.id) for comment in comments}
        self.newest = max((comment.created_at for comment in comments), default=None)
        self.last_check_time = _utc_now()
        log.info("%s: comment detection initialised with %d comment(s)", self._key, len(self.last_comment_ids))

    async def initialize_from_forge(self) -> None:
        """Record the comments that exist now (when no saved state can be restored)."""
        if not self.enabled:
            return
        try:
            self.initialize(await self._fetch())
        except Exception as error:  # seed 000 2.3.3: log and go on
            log.warning("%s: could not list comments to initialise detection: %s", self._key, error)

    async def _fetch(self, since: datetime | None = None) -> list[Comment]:
        if not self._key.is_change:
            return await self._source.list_comments(self._key, since)
        comments, threads = await asyncio.gather(
            self._source.list_comments(self._key, since), self._source.list_threads(self._key)
        )
        return [*comments, *thread_comments(threads)]

    def is_bot_comment(self, comment: Comment) -> bool:
        return bool(self._bot) and comment.author.casefold() == self._bot

    async def check(self) -> list[Comment]:
        """Comments not seen before and not the bot's own, oldest first; [] on any error."""
        if not self.enabled:
            return []
        since = self.newest - LOOK_BACK if self.newest is not None else None
        try:
            current = await self._fetch(since)
        except Exception as error:  # seed 000 2.3.4: a failed look is no reason to fail the run
            log.warning("%s: could not list comments (detection goes on next time): %s", self._key, error)
            return []
        new: list[Comment] = []
        for comment in current:
            if str(comment.id) in self.last_comment_ids:
                continue
            if self.is_bot_comment(comment):
                log.debug("%s: own comment %s ignored", self._key, comment.id)
            else:
                new.append(comment)
        listed = {str(comment.id) for comment in current}
        # A whole listing replaces the known ids (deleted ones go); a recent part adds to them.
        self.last_comment_ids = listed if since is None else self.last_comment_ids | listed
        times = [comment.created_at for comment in current]
        self.newest = max(times, default=None) if since is None else max([*times, since + LOOK_BACK])
        self.last_check_time = _utc_now()
        if new:
            log.info("%s: %d new comment(s) detected", self._key, len(new))
        return sorted(new, key=lambda comment: (comment.created_at, comment.id))

    async def message(self, comments: Sequence[Comment]) -> str | None:
        """`comments` as one user message for the model (None: no comments); text of
        untrusted authors goes in the wrapper. The loop appends it (steering's `Decision`)."""
        if not comments:
            return None
        bodies = [comment.body for comment in comments]
        if self.trust is not None:
            try:
                await self.trust.load(self._source, self._key, {comment.author for comment in comments})
            except Exception as error:  # unknown access: everyone unknown is untrusted below
                log.warning("%s: could not check commenters' access: %s", self._key, error)
            wrap = self.trust.wrapper.wrap
            bodies = [body if self.trust(c.author) else wrap(c.author, body) for c, body in zip(comments, bodies)]
        log.info("%s: %d new comment(s) sent to the model", self._key, len(comments))
        return format_comment_message(comments, bodies)

    def get_state(self) -> dict[str, Any]:
        return {
            "last_comment_ids": sorted(self.last_comment_ids),
            "last_check_timestamp": self.last_check_time.isoformat() if self.last_check_time else None,
            "newest_comment": self.newest.isoformat() if self.newest else None,
        }

    def restore_state(self, state: Any) -> bool:
        """Restore `get_state()`'s dict; False (and nothing changed) when it is unusable."""
        try:
            ids = {str(item) for item in state["last_comment_ids"]}
            stamp = state.get("last_check_timestamp")
            checked = datetime.fromisoformat(stamp) if stamp else None
            newest_stamp = state.get("newest_comment")  # absent in an older save: list them all once
            newest = datetime.fromisoformat(newest_stamp) if newest_stamp else None
        except (TypeError, KeyError, ValueError, AttributeError) as error:
            log.warning("%s: saved comment-detection state unusable (%s); re-initialising", self._key, error)
            return False
        self.last_comment_ids, self.last_check_time, self.newest = ids, checked, newest
        log.info("%s: comment detection restored with %d known comment(s)", self._key, len(ids))
        return True

"""Forge writes that must happen once, and bodies the forge will accept.

A POST that creates something (a comment, a PR/MR) is not idempotent: when it fails
with a 5xx or a timeout, the forge may well have applied it (a proxy gave up in front
of a slow server). Retrying blindly then duplicates the comment. So every created
comment carries a hidden marker, an HTML comment no renderer shows
(`<!-- coding-agent:<random id> -->`), and before any retry the adapter looks for
the marker among the item's comments (or, for a PR/MR, for the open one of the branch):
found means done. Markers are stripped again whenever comments are read, so nothing
above the adapters ever sees one.

Bodies are capped at the forge's limit (GitHub: 65,536 characters) with a note that
the full text is in the run's context, so a 10 MB model reply cannot get the final
comment refused with a 422.
"""

from __future__ import annotations

import re
import uuid
from collections.abc import Awaitable, Callable
from typing import TypeVar

from coding_agent.errors import TransientError
from coding_agent.retry import RetryPolicy, retry_async

__all__ = ["cap_body", "marked", "new_marker", "has_marker", "strip_marker", "write_once", "TRUNCATION_NOTE"]

T = TypeVar("T")

_MARKER = re.compile(r"\s*<!-- coding-agent:[0-9a-f]{32} -->\s*\Z")
TRUNCATION_NOTE = "\n\n… (cut at the forge's length limit; the full text is in the run's context)"


def new_marker() -> str:
    return uuid.uuid4().hex


def _tag(marker: str) -> str:
    return f"<!-- coding-agent:{marker} -->"


def marked(body: str, marker: str) -> str:
    """`body` with its hidden marker at the end."""
    return f"{body}\n\n{_tag(marker)}"


def has_marker(body: str | None, marker: str) -> bool:
    return body is not None and _tag(marker) in body  # "" holds no tag


def strip_marker(body: str) -> str:
    """A body as its author wrote it: without the marker we added when posting it."""
    return _MARKER.sub("", body)


def cap_body(body: str, limit: int) -> str:
    """`body`, cut to at most `limit` characters (room kept for the marker) with a note."""
    room = limit - len(_tag(new_marker())) - 2
    if len(body) <= room:
        return body
    return body[: room - len(TRUNCATION_NOTE)] + TRUNCATION_NOTE


async def write_once(
    what: str,
    send: Callable[[], Awaitable[T]],
    find: Callable[[], Awaitable[T | None]],
    policy: RetryPolicy,
    sleep: Callable[[float], Awaitable[None]],
) -> T:
    """A non-idempotent write under the retry policy, never repeated once it took effect.

    `send` writes; `find` returns what an earlier attempt created, or None. A retry
    after a failure that may have been applied (5xx, timeout, dropped connection) asks
    `find` first; one after a rate limit does not need to.
    """
    check = False

    async def attempt() -> T:
        nonlocal check
        if check:
            found = await find()
            if found is not None:
                return found
        try:
            return await send()
        except TransientError as error:
            check = check or error.maybe_applied
            raise

    return await retry_async(attempt, policy, what, sleep=sleep)

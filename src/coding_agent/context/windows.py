"""The two window computations of the context (SPEC 9.1, 9.2, 9.3), written once.

`newest` keeps the last `limit` items (comments by `max_comment_count`, channel messages
by `channel_messages_limit`); `compression_cut` says where the kept tail of a history
starts (`keep_recent_messages`). Both used to be inline slices whose negative start
silently wrapped around (six comments under a limit of ten kept four), so they live here
with a property test over every length and limit.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TypeVar

__all__ = ["newest", "compression_cut"]

T = TypeVar("T")


def newest(items: Sequence[T], limit: int) -> list[T]:
    """The last `limit` items of `items` (all of them when there are fewer; none for 0)."""
    if limit <= 0:
        return []
    return list(items[max(len(items) - limit, 0) :])


def compression_cut(length: int, head: int, keep_recent: int, is_tool_answer: Callable[[int], bool]) -> int:
    """Index where the kept recent messages start: `head <= cut <= length`.

    The newest `keep_recent` messages stay; the cut moves back over tool answers so that a
    tool call and its answer are never separated. `cut == head` means nothing to compress.
    """
    cut = max(length - max(keep_recent, 0), head)
    while head < cut < length and is_tool_answer(cut):
        cut -= 1
    return cut

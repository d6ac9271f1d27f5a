"""Builds the seed-004 `ChannelMessages` of a task from its comments and threads.

The newest `limit` messages across the top-level stream and every thread are kept, as
the seed's `channel_messages_limit` does; a thread whose parent (its first comment) fell
outside that window gets the parent back at the top level, so the model never reads
replies to a message it cannot see. The comments come already wrapped where untrusted
(`UntrustedWrapper.comment`): this module only selects and files them.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

from coding_agent.context.windows import newest
from coding_agent.domain.channel import ChannelMessages
from coding_agent.domain.tasks import Comment, Thread

__all__ = ["build_channel_messages"]


def build_channel_messages(
    channel_id: str,
    channel_name: str,
    comments: Sequence[Comment],
    threads: Sequence[Thread],
    limit: int,
) -> ChannelMessages:
    """`comments` are the top-level stream; each thread's comments are filed under its id."""
    messages = [replace(c, thread_id=None) if c.thread_id is not None else c for c in comments]
    for thread in threads:
        messages.extend(c if c.thread_id == thread.id else replace(c, thread_id=thread.id) for c in thread.comments)
    messages.sort(key=lambda m: m.created_at)
    kept = newest(messages, limit)

    top_level = [m for m in kept if m.thread_id is None]
    by_thread: dict[str, list[Comment]] = {}
    for message in kept:
        if message.thread_id is not None:
            by_thread.setdefault(message.thread_id, []).append(message)
    parents = {thread.id: replace(thread.comments[0], thread_id=thread.id) for thread in threads if thread.comments}
    shown = {(m.thread_id, m.id) for m in top_level}
    for thread_id in by_thread:
        parent = parents.get(thread_id)
        if parent is not None and (thread_id, parent.id) not in shown:
            top_level.append(parent)
    top_level.sort(key=lambda m: m.created_at)
    return ChannelMessages(channel_id, channel_name, top_level, by_thread)

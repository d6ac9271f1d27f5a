"""`coding-agent memory list|clear [REPO]`: what the agent remembers, for the operator.

REPO is `owner/repo` (any forge) or `github:owner/repo` / `gitlab:group/project`. The
listing shows each repository's long- and short-term memory, when it was last active,
its organisation's derived memories, and its thread memories (newest first).
"""

from __future__ import annotations

from datetime import UTC, datetime

from coding_agent.context.memory import derive_workspace_memories
from coding_agent.domain.memories import ChannelRecord
from coding_agent.domain.ports import MemoryRepository

__all__ = ["memory_listing", "clear_memories", "matching_channels"]

DAY = 86400.0


def _when(timestamp: float) -> str:
    return datetime.fromtimestamp(timestamp, UTC).strftime("%Y-%m-%d %H:%M UTC")


def matching_channels(store: MemoryRepository, repo: str | None) -> list[ChannelRecord]:
    """Channels named by `repo` (all when None)."""
    channels = store.channels()
    if repo is None:
        return channels
    wanted = repo.strip().lower()
    return [c for c in channels if wanted in (c.channel_id.lower(), c.channel_name.lower())]


def _indented(text: str | None) -> str:
    if not text:
        return "    (none)"
    return "\n".join(f"    {line}" for line in text.strip().splitlines())


def memory_listing(store: MemoryRepository, repo: str | None, active_channel_days: float, now: float) -> list[str]:
    """The lines `memory list` prints."""
    channels = matching_channels(store, repo)
    if not channels:
        return [f"no memories of {repo}" if repo else "no memories recorded"]
    lines: list[str] = []
    active_since = now - active_channel_days * DAY
    for workspace in sorted({c.workspace_id for c in channels}):
        members = store.channels(workspace)
        long_term, short_term = derive_workspace_memories(members, active_since)
        lines += [f"== {workspace} (organisation/group)", _indented(long_term), _indented(short_term)]
        for channel in (c for c in channels if c.workspace_id == workspace):
            state = "active" if channel.last_active_at >= active_since else "inactive"
            lines.append(f"-- {channel.channel_id}  last active {_when(channel.last_active_at)} ({state})")
            lines += ["  long-term:", _indented(channel.long_term), "  short-term:", _indented(channel.short_term)]
            threads = store.thread_memories(channel.channel_id)
            lines.append(f"  thread memories: {len(threads)}")
            for thread in threads:
                lines.append(f"  - {thread.thread_id} at {_when(thread.created_at)} (run {thread.run_uuid}):")
                lines.append(_indented(thread.summary))
    return lines


def clear_memories(store: MemoryRepository, repo: str | None) -> tuple[int, int]:
    """Forget `repo`'s memories (or all); returns (repositories, rows removed)."""
    if repo is None:
        channels = store.channels()
        return len(channels), store.clear()
    channels = matching_channels(store, repo)
    return len(channels), sum(store.clear(channel.channel_id) for channel in channels)

"""Memories as the memory store reports them (SPEC 9.2), and how a task names its channel.

Plain values, below `context` (which builds a run's memories from them) and `runtime`
(whose `memory_store` keeps them in the database): the memory keeper reads them through
the `domain.ports.MemoryRepository` port.
"""

from __future__ import annotations

from dataclasses import dataclass

from coding_agent.domain.tasks import TaskKey

__all__ = ["ChannelRecord", "ThreadRecord", "channel_of", "workspace_of"]


@dataclass(frozen=True)
class ChannelRecord:
    channel_id: str
    workspace_id: str
    channel_name: str
    long_term: str | None
    short_term: str | None
    updated_at: float | None
    last_active_at: float


@dataclass(frozen=True)
class ThreadRecord:
    channel_id: str
    thread_id: str
    run_uuid: str
    summary: str
    created_at: float


def channel_of(key: TaskKey) -> tuple[str, str]:
    """(channel id, channel name) of a task: `github:acme/widgets`, `acme/widgets`."""
    return f"{key.forge}:{key.project}", key.project


def workspace_of(key: TaskKey) -> str:
    """The organisation/group of a task: the project's namespace, `github:acme`."""
    return f"{key.forge}:{key.project.rsplit('/', 1)[0]}"

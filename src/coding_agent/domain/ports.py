"""Narrow ports: what a lower floor needs from a higher one, as Protocols.

The agent and the context builders run against these; the runtime owns the real
implementations (`store.state.StateStore`, `store.memories.MemoryStore`,
`workspace.session.RunWorkspaces`) and hands them down. So imports point down, and each
port says exactly which part of the store its user relies on.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any, Protocol

from coding_agent.domain.delivery import PushedHead
from coding_agent.domain.memories import ChannelRecord, ThreadRecord
from coding_agent.domain.runs import PausedWork, RunMarks, RunRecord
from coding_agent.domain.tasks import Task, TaskKey

__all__ = [
    "RunStore", "RunRows", "LeaseRows", "SteeringRows", "TaskNotes", "MemoryRepository", "RunCheckout", "Workspaces",
]


class RunRows(Protocol):
    """The runs and their token usage, as a run writes them (`store.runs.Runs`)."""

    def start_run(
        self, run_uuid: str, task_key: str, owner: str, requester: str | None, lease_seconds: float | None = None
    ) -> bool: ...

    def heartbeat(
        self,
        task_key: str,
        owner: str,
        ttl_seconds: float,
        run_uuid: str,
        steps: int,
        usages: Sequence[tuple[int, int]] = (),
    ) -> bool: ...

    def record_usages(self, run_uuid: str, task_key: str, usages: Sequence[tuple[int, int]]) -> None: ...

    def finish_run(self, run_uuid: str, status: str, steps: int, error: str | None = None) -> None: ...

    def all(self, task_key: str | None = None) -> list[RunRecord]: ...

    def abandon_own_run(self, run_uuid: str, owner: str, steps: int, reason: str) -> bool: ...


class LeaseRows(Protocol):
    """The task's lease, which the run renews while it works and releases at its end."""

    def release_lease(self, task_key: str, owner: str) -> None: ...

    def renew_lease(self, task_key: str, owner: str, ttl_seconds: float) -> bool: ...


class SteeringRows(Protocol):
    """Operator requests and the run marks: what a run must never do twice."""

    def control_request(self, task_key: str) -> str | None: ...

    def steering_requests(self, task_key: str) -> tuple[str | None, str | None]: ...

    def clear_control_request(self, task_key: str) -> None: ...

    def run_marks(self, run_uuid: str) -> RunMarks: ...

    def set_progress_comment(self, run_uuid: str, comment_id: str) -> None: ...

    def record_final(self, run_uuid: str, status: str, body: str) -> None: ...

    def mark_final_posted(self, run_uuid: str) -> None: ...

    def pause_run(self, run_uuid: str, steps: int, hold: bool) -> None: ...


class TaskNotes(Protocol):
    """What each task is, for the dashboard and `status`."""

    def note_task(self, task_key: str, title: str, url: str | None) -> None:
        """The task's title and link as the forge gives them now."""
        ...

    def note_change(self, task_key: str, change_url: str) -> None:
        """The PR/MR a run opened or updated for the task."""
        ...


class RunStore(Protocol):
    """The parts of the state store a run reads and writes while it works, one table
    family each (`store.state.StateStore` holds them under these names)."""

    @property
    def runs(self) -> RunRows: ...

    @property
    def leases(self) -> LeaseRows: ...

    @property
    def steering(self) -> SteeringRows: ...

    @property
    def tasks(self) -> TaskNotes: ...


class MemoryRepository(Protocol):
    """Channel and thread memories, as the memory keeper and the admin commands use them."""

    def touch_channel(self, key: TaskKey) -> None: ...

    def write_channel(self, key: TaskKey, long_term: str | None, short_term: str | None) -> None: ...

    def add_thread_memory(self, key: TaskKey, run_uuid: str, summary: str) -> None: ...

    def channel(self, channel_id: str) -> ChannelRecord | None: ...

    def channels(self, workspace_id: str | None = None, active_since: float | None = None) -> list[ChannelRecord]: ...

    def thread_memories(self, channel_id: str | None = None, since: float | None = None) -> list[ThreadRecord]: ...

    def clear(self, channel_id: str | None = None) -> int: ...


class RunCheckout(Protocol):
    """One run's clone as the runner uses it: cloned (or found again, for a continued
    run), its rule files for the system prompt, and its delivery at done."""

    async def prepare(self) -> object: ...

    def rules(self) -> dict[str, str]: ...

    async def deliver(
        self, summary: str, requester: str | None, run_uuid: str, language: Any, body_notes: str = ""
    ) -> str:
        """Commit, push, open or update the PR/MR; the final comment: `summary` plus
        where the change went. (`language`: a `prompts.notices.Language`.)"""
        ...

    def change_url(self) -> str | None:
        """After `deliver`: the link of the PR/MR it opened or updated (None: none)."""
        ...

    def pushed_head(self) -> PushedHead | None:
        """After `deliver`: the commit it pushed to a PR/MR's branch (None: no push, or
        no PR/MR to watch)."""
        ...

    async def pause(self, run_uuid: str, steps: int) -> PausedWork | None:
        """At a pause: the WIP commit pushed to the task's branch (SPEC 8.3); None when
        there is no clone yet or it could not be committed."""
        ...


class Workspaces(Protocol):
    """Where runs' clones live and how one is opened: the runtime's, handed to the
    runner, which never builds workspace objects itself."""

    def directory(self, run_uuid: str) -> Path:
        """A new run's workspace directory, created empty."""
        ...

    def open(
        self,
        source: Any,
        task: Task,
        path: Path,
        record: Path,
        paused: PausedWork | None = None,
        fresh_since: float | None = None,
    ) -> RunCheckout:
        """The clone of `task` at `path` through `source` (the task's `sources.base.Source`,
        typed loosely here because sources stand above domain); `record` is where a
        continued run finds the clone again; the clone holds every push made before
        `fresh_since` (a `time.monotonic()`, when the run was picked up; default: now)."""
        ...

    def discard(self, path: Path) -> None:
        """Delete an ended run's clone at `path` (unless the operator keeps finished ones)."""
        ...

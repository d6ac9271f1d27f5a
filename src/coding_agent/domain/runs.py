"""A run as the state store reports it: plain values, no database types.

Here, below the agent and the runtime, so that the runner and the steering code read
runs through the `domain.ports.RunStore` port without importing the store itself.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["RunRecord", "RunMarks", "PausedWork"]


@dataclass(frozen=True)
class PausedWork:
    """Where a paused run's files are (SPEC 8.3): `commit` on the task's `branch`, the WIP
    commit its pause pushed (None: an empty repository). No path of any machine: a
    worker anywhere recreates the clone from it. `pushed`: the push reached the forge
    (else the commit is only in the clone of the machine that paused)."""

    branch: str
    commit: str | None
    pushed: bool = False


@dataclass(frozen=True)
class RunRecord:
    uuid: str
    task_key: str
    status: str
    owner: str
    started_at: float
    finished_at: float | None
    steps: int
    prompt_tokens: int
    completion_tokens: int
    requester: str | None
    error: str | None


@dataclass(frozen=True)
class RunMarks:
    """A run's guards (the `run_marks` table of the state store); all empty for a run that has none yet."""

    progress_comment_id: str | None = None
    resume_hold: bool = False
    final_status: str | None = None
    final_body: str | None = None
    final_posted: bool = False

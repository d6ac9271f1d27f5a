"""A run as the state store reports it: plain values, no database types.

Here, below the agent and the runtime, so that the runner and the steering code read
runs through the `domain.ports.RunStore` port without importing the store itself.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["RunRecord", "RunMarks"]


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

"""How steering ends a run early: exceptions raised at a checkpoint, handled by the runner.

They are not `AgentError`s on purpose: a pause or a stop is not a failure, and must never
be published as one (no failed label, no error comment).
"""

from __future__ import annotations

from typing import Literal

__all__ = ["RunInterrupted", "RunPaused", "RunStopped", "LeaseLost", "PauseReason", "StopReason"]

PauseReason = Literal["signal", "operator", "shutdown", "budget"]
StopReason = Literal["unassigned", "operator"]


class RunInterrupted(Exception):
    """The loop ends here, on steering's word; the runner publishes the matching ending."""


class RunPaused(RunInterrupted):
    """Pause: save everything, label paused. `hold`: wait for `coding-agent resume`.
    `comment`: the pause comment, when the cause words its own (a daily budget's)."""

    def __init__(self, reason: PauseReason, hold: bool, comment: str | None = None) -> None:
        super().__init__(f"paused ({reason})")
        self.reason: PauseReason = reason
        self.hold = hold
        self.comment = comment


class RunStopped(RunInterrupted):
    """Stop for good: stop comment, stopped label, context to completed/."""

    def __init__(self, reason: StopReason) -> None:
        super().__init__(f"stopped ({reason})")
        self.reason: StopReason = reason


class LeaseLost(RunInterrupted):
    """Another worker holds the task's lease now: leave the task to it, touch nothing."""

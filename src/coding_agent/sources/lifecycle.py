"""Label transitions of the task lifecycle (SPEC 3), written once.

A transition adds the new label first and then removes the old ones, one label at a
time: never a whole-list overwrite from a stale snapshot, and a crash in between leaves
a task that still carries a label the next poll understands.
"""

from __future__ import annotations

from collections.abc import Iterable

from coding_agent.domain.tasks import TaskKey
from coding_agent.sources.base import Source

__all__ = ["transition", "lifecycle_labels"]


def lifecycle_labels(source: Source) -> tuple[str, ...]:
    """Every label the agent itself puts on a task (not the trigger label)."""
    labels = source.labels
    return (
        labels.processing_label,
        labels.done_label,
        labels.paused_label,
        labels.stopped_label,
        labels.failed_label,
    )


async def transition(source: Source, key: TaskKey, to: str, present: Iterable[str]) -> None:
    """Put label `to` on the task and take off each label in `present` (except `to`)."""
    await source.add_label(key, to)
    for label in dict.fromkeys(present):
        if label != to:
            await source.remove_label(key, label)

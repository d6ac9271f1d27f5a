"""The port through which a run learns whether its worker still holds the task (SPEC 3).

The worker (runtime) owns the lease and keeps it alive; the run (agent) only asks, at
each step, whether it is still its to work. A Protocol here keeps the agent from
importing the runtime that drives it.
"""

from __future__ import annotations

from typing import Protocol

__all__ = ["LeaseWatch"]


class LeaseWatch(Protocol):
    @property
    def lost(self) -> bool:
        """True once another worker holds the task's lease: the run must write nothing more."""
        ...

"""Stop by unassigning the bot (SPEC 8.2, seed 002).

The assignees are re-read from the forge at a check (a conditional request: a 304 when
nothing changed), never taken from the snapshot of the run's start, which could not see
an unassign. Only a run whose bot was assigned at some point can be stopped this way: on
a task triggered by its label alone there is nothing to unassign, and an empty assignee
list must not stop it.

When to check (`task_stop`): `check_interval` 0 never; N on iterations 1, 1+N, 1+2N, ...
and never sooner than `min_check_interval_seconds` after the previous check, except
the first one, which always runs. A failing read is logged and never stops the run.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import Any

from coding_agent.config import TaskStopConfig
from coding_agent.domain.tasks import TaskKey
from coding_agent.sources.base import Source

__all__ = ["StopChecker"]

log = logging.getLogger(__name__)


class StopChecker:
    """Decides when to re-read the assignees, and whether the bot was unassigned."""

    def __init__(
        self,
        source: Source,
        key: TaskKey,
        bot_name: str | None,
        config: TaskStopConfig,
        initially_assigned: bool,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._source = source
        self._key = key
        self._bot = (bot_name or "").casefold()
        self._interval = config.check_interval
        self._min_seconds = config.min_check_interval_seconds
        self._clock = clock
        self.enabled = config.enabled and config.check_interval > 0 and bool(bot_name)
        if config.enabled and config.check_interval > 0 and not bot_name:
            log.warning("%s: no bot_name is configured for %s; stop by unassign is off", key, key.forge)
        self.armed = initially_assigned
        self.last_check: float | None = None
        self.reads = 0
        self._nudged = False

    def nudge(self) -> None:
        """The forge told us (a webhook) that the assignees changed: check at the next
        checkpoint, whatever `check_interval` and `min_check_interval_seconds` say."""
        self._nudged = True

    def should_check_now(self, iteration: int) -> bool:
        """Whether the check runs at this point of `iteration` (1-based); records the time if so."""
        if self.enabled and self._nudged:
            self._nudged = False
            self.last_check = self._clock()
            return True
        if not self.enabled or iteration < 1 or (iteration - 1) % self._interval != 0:
            return False
        now = self._clock()
        if self.last_check is not None and now - self.last_check < self._min_seconds:
            return False
        self.last_check = now
        return True

    async def bot_unassigned(self, iteration: int) -> bool:
        """True when the bot was assigned and is not any more (read from the forge now)."""
        if not self.should_check_now(iteration):
            return False
        self.reads += 1
        try:
            assignees = await self._source.get_assignees(self._key)
        except Exception as error:  # seed 002 S7: never stop on an error; check again next time
            log.error("%s: could not read the assignees (the run goes on): %s", self._key, error)
            return False
        if any(name.casefold() == self._bot for name in assignees):
            self.armed = True
            return False
        if self.armed:
            log.info("%s: the bot was unassigned; stopping the run", self._key)
        return self.armed

    def get_state(self) -> dict[str, Any]:
        return {"armed": self.armed}

    def restore_state(self, state: Any) -> None:
        if isinstance(state, dict) and isinstance(state.get("armed"), bool):
            self.armed = state["armed"]

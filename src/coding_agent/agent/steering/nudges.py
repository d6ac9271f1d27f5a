"""Webhook nudges from other processes (SPEC 11.2), read with the operator's requests.

A webhook lands on the producer (or `serve`), which may not be the process whose run
holds the task: that process records a nudge in the state store, and the run sees it
here. The nudge rides on the store read the pause check makes anyway (the operator's
`pause`/`stop`, `pause.REQUEST_READ_SECONDS` apart), so it costs no extra read per
checkpoint and no forge request; a new one makes the run re-read its assignees at this
checkpoint, whatever `task_stop.min_check_interval_seconds` says. (Comments are read at
every checkpoint already; an unassign is what the interval would have held back.)
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from coding_agent.domain.ports import RunStore

__all__ = ["StoreRequests"]

log = logging.getLogger(__name__)


class StoreRequests:
    """The operator request of one task, for `PauseWatch`; calls `on_nudge` when the
    same read shows a nudge the run has not acted on. `PauseWatch` calls it in a worker
    thread and waits for it, so `on_nudge` (which only sets a flag) has happened before
    the checkpoint goes on to its stop check."""

    def __init__(self, store: RunStore, task_key: str, on_nudge: Callable[[], None]) -> None:
        self._store = store
        self._key = task_key
        self._on_nudge = on_nudge
        self._seen: str | None = None

    def __call__(self) -> str | None:
        request, nudge = self._store.steering_requests(self._key)
        if nudge is not None and nudge != self._seen:
            # The first one may predate the run (the webhook that assigned it); acting on
            # it costs one assignee read, which the run's first check makes anyway.
            self._seen = nudge
            log.info("%s: a webhook reported a change; asking the forge at this checkpoint", self._key)
            self._on_nudge()
        return request

"""What ends a run early (SPEC 8.2, 8.3), and the triggers a checkpoint reads for it.

The endings are exceptions raised at a checkpoint and handled by the runner. They are
not `AgentError`s on purpose: a pause or a stop is not a failure, and must never be
published as one (no failed label, no error comment).

Three ways to ask a run to pause:

- the signal file (`pause_resume.signal_file`, default `<contexts>/pause_signal`): every
  run of every worker sharing the directory pauses, and resumes by itself once the
  file is gone;
- `coding-agent pause TASK`: a request row in the state store that the run's worker
  sees wherever it runs; the run then waits for `coding-agent resume`;
- a graceful shutdown (SIGTERM/SIGINT on a worker): the process's runs pause, and the
  next worker resumes them.

An operator's `stop` request travels the same way but is a stop, decided after pause.
A run also stops when its bot is unassigned (seed 002): the assignees are re-read from
the forge at a check (a conditional request: a 304 when nothing changed), never taken
from the snapshot of the run's start, which could not see an unassign. Only a run whose
bot was assigned at some point can be stopped this way: on a task triggered by its label
alone there is nothing to unassign, and an empty assignee list must not stop it. When to
check (`task_stop`): `check_interval` 0 never; N on iterations 1, 1+N, 1+2N, ... and
never sooner than `min_check_interval_seconds` after the previous check, except the
first one, which always runs. A failing read is logged and never stops the run. The same
read of the task shows the stop label (`stop_label`, SPEC 17), which stops any run, one
started by its label alone too (a GitHub App cannot be assigned).

Webhook nudges from other processes (SPEC 11.2): a webhook lands on the producer (or
`serve`), which may not be the process whose run holds the task: that process records a
nudge in the state store, and the run sees it on the store read the pause check makes
anyway (`REQUEST_READ_SECONDS` apart), so it costs no extra read per checkpoint and no
forge request; a new one makes the run re-read its assignees at this checkpoint,
whatever `task_stop.min_check_interval_seconds` says.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any, Literal, TypeVar

from coding_agent.config import AgentConfig, TaskStopConfig
from coding_agent.domain.ports import RunStore
from coding_agent.domain.tasks import TaskKey
from coding_agent.sources.base import Source

__all__ = [
    "RunInterrupted",
    "RunPaused",
    "RunStopped",
    "LeaseLost",
    "PauseReason",
    "StopReason",
    "ShutdownSignal",
    "PauseWatch",
    "pause_signal_path",
    "REQUEST_READ_SECONDS",
    "StoreRequests",
    "StopChecker",
]

log = logging.getLogger(__name__)

T = TypeVar("T")

PauseReason = Literal["signal", "operator", "shutdown", "budget"]
StopReason = Literal["unassigned", "operator", "stop_label"]


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


def pause_signal_path(config: AgentConfig) -> Path:
    """Where the pause signal file lives for this configuration."""
    configured = config.pause_resume.signal_file
    return Path(configured) if configured else Path(config.context_storage.base_dir) / "pause_signal"


class ShutdownSignal:
    """Set once the process is asked to shut down; its running runs then pause (SPEC 8.3).

    The shutdown is bounded in time: `begin` is given the grace and the time left after it
    for the pauses' writes. Until the grace ends a run pauses at its next checkpoint; then
    the signal is `cut`: a model request or tool call still in flight is given up
    (`wait_cut`), and the run pauses as it stood before it. Each write of a pause is bounded
    by `remaining()`, so a forge or a broker that does not answer cannot hold the exit up;
    what could not be written is finished by the next worker, as after a crash."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._event = threading.Event()
        self._cut = False
        # What `wait_cut` waits on, made in the loop that waits (a service may outlive
        # one `asyncio.run`, and an asyncio.Event belongs to the first loop it waits in).
        self._cut_event: asyncio.Event | None = None
        self._cut_loop: asyncio.AbstractEventLoop | None = None
        self._clock = clock
        self._deadline: float | None = None

    def set(self) -> None:
        self._event.set()

    def begin(self, grace: float, finish: float) -> None:
        """The shutdown starts now: runs pause within `grace`, their writes end `finish` later."""
        self._deadline = self._clock() + grace + finish
        self._event.set()

    def is_set(self) -> bool:
        return self._event.is_set()

    def cut(self) -> None:
        """The grace is over: what a run is waiting for (the model, a tool) is given up.
        Called in the event loop's thread."""
        self._event.set()
        self._cut = True
        if self._cut_event is not None:
            self._cut_event.set()

    def is_cut(self) -> bool:
        return self._cut

    async def wait_cut(self) -> None:
        loop = asyncio.get_running_loop()
        if self._cut_event is None or self._cut_loop is not loop:
            self._cut_event, self._cut_loop = asyncio.Event(), loop
            if self._cut:
                self._cut_event.set()
        await self._cut_event.wait()

    def remaining(self) -> float | None:
        """Seconds left for a shutting-down run's writes (None: no shutdown, or unbounded)."""
        if self._deadline is None:
            return None
        return max(0.0, self._deadline - self._clock())

    async def bounded(self, write: Awaitable[T], what: str, reserve: float = 0.0) -> T | None:
        """`write`, or None when the shutdown's time (less `reserve`, kept for the writes
        after it) runs out first: then it is given up, and logged naming `what`."""
        remaining = self.remaining()
        if remaining is None:
            return await write
        try:
            return await asyncio.wait_for(write, max(0.0, remaining - reserve))
        except TimeoutError:
            log.warning("shutdown: %s did not finish in time; the next worker finishes it", what)
            return None


# How long an answer of the state store about operator requests is reused: a checkpoint
# comes every few milliseconds in a fast loop, and an operator does not need it sooner.
REQUEST_READ_SECONDS = 0.25


class PauseWatch:
    """Answers "should this run pause now?" from the three triggers."""

    def __init__(
        self,
        enabled: bool,
        signal_file: Path,
        shutdown: ShutdownSignal,
        operator_request: Callable[[], str | None],
        clock: Callable[[], float] = time.monotonic,
        stored: Callable[[Callable[[], str | None]], Awaitable[Any]] | None = None,
    ) -> None:
        """`stored`: how the store read is made (the run's `StoreCall`, which waits through
        an outage); by default in a worker thread."""
        self.enabled = enabled
        self.signal_file = signal_file
        self._shutdown = shutdown
        self._operator_request = operator_request
        self._clock = clock
        self._stored = stored or asyncio.to_thread
        self._read_at: float | None = None
        self._request: str | None = None

    async def operator_request(self) -> str | None:
        """The operator's pending `pause` or `stop` for this task (a state store read,
        at most one per REQUEST_READ_SECONDS, in a thread: a PostgreSQL round trip or a
        SQLite lock wait must not stall the other runs on the event loop). While the store
        cannot be reached the run holds here, at its checkpoint, until it answers."""
        now = self._clock()
        if self._read_at is None or now - self._read_at >= REQUEST_READ_SECONDS:
            self._request, self._read_at = await self._stored(self._operator_request), now
        return self._request

    def pause_for(self, request: str | None) -> RunPaused | None:
        """The pause to raise now, given the operator's pending `request`, or None."""
        if not self.enabled:
            return None
        if request == "pause":
            return RunPaused("operator", hold=True)
        if self.signal_file.exists():
            return RunPaused("signal", hold=False)
        if self._shutdown.is_set():
            return RunPaused("shutdown", hold=False)
        return None


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
        request, nudge = self._store.steering.steering_requests(self._key)
        if nudge is not None and nudge != self._seen:
            # The first one may predate the run (the webhook that assigned it); acting on
            # it costs one assignee read, which the run's first check makes anyway.
            self._seen = nudge
            log.info("%s: a webhook reported a change; asking the forge at this checkpoint", self._key)
            self._on_nudge()
        return request


class StopChecker:
    """Decides when to re-read the task, and whether the bot was unassigned or the stop
    label (SPEC 17: `stop_label`, for tasks started by their label alone, as an app's are)
    was added."""

    def __init__(
        self,
        source: Source,
        key: TaskKey,
        bot_name: str | None,
        config: TaskStopConfig,
        initially_assigned: bool,
        clock: Callable[[], float] = time.monotonic,
        stop_label: str | None = None,
    ) -> None:
        self._source = source
        self._key = key
        self._bot = (bot_name or "").casefold()
        self._stop_label = (stop_label or "").casefold()
        self._interval = config.check_interval
        self._min_seconds = config.min_check_interval_seconds
        self._clock = clock
        self.enabled = config.enabled and config.check_interval > 0 and bool(bot_name or stop_label)
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
        return await self.stop_reason(iteration) == "unassigned"

    async def stop_reason(self, iteration: int) -> StopReason | None:
        """Why the run stops, read from the forge now (one read of the task: its labels
        and assignees): the stop label added, or the bot unassigned; None to go on."""
        if not self.should_check_now(iteration):
            return None
        self.reads += 1
        try:
            task = await self._source.get_task(self._key)
        except Exception as error:  # seed 002 S7: never stop on an error; check again next time
            log.error("%s: could not read the assignees (the run goes on): %s", self._key, error)
            return None
        found = next((label for label in task.labels if self._stop_label and label.casefold() == self._stop_label), None)
        if found is not None and await self._added_by_a_writer(found):
            log.info("%s: the stop label was added; stopping the run", self._key)
            return "stop_label"
        if not self._bot:
            return None
        if any(name.casefold() == self._bot for name in task.assignees):
            self.armed = True
            return None
        if self.armed:
            log.info("%s: the bot was unassigned; stopping the run", self._key)
            return "unassigned"
        return None

    async def _added_by_a_writer(self, label: str) -> bool:
        """Whether the stop label's newest adder has write access (SPEC 17): anyone who may
        label (GitHub's triage role, GitLab's Reporter) must not stop a maintainer's run."""
        try:
            actor = await self._source.find_trigger_user(self._key, label)
            permission = await self._source.get_permission(self._key, actor) if actor else None
        except Exception as error:  # like any failed read: the run goes on, looked at again next time
            log.error("%s: could not read who added the stop label (the run goes on): %s", self._key, error)
            return False
        if permission is None or not permission.can_write:
            log.warning(
                "%s: the stop label was added by %s, without write access: ignored", self._key, actor or "someone unknown"
            )
            return False
        return True

    def get_state(self) -> dict[str, Any]:
        return {"armed": self.armed}

    def restore_state(self, state: Any) -> None:
        if isinstance(state, dict) and isinstance(state.get("armed"), bool):
            self.armed = state["armed"]

"""What the steering parts of one run share: the process's settings, and the run itself.

`RunControls` is one per worker process (settings, the store port, the shutdown signal
every run watches). `RunScope` is one per run: which task, where its files and workspace
are, and the two things that change as it goes (its step count and its progress
comment). Each part (checkpoint, saving, final comment, endings) reads the scope rather
than the others, so that none of them has to know how the rest is wired.
"""

from __future__ import annotations

import asyncio
import time
import weakref
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from coding_agent.agent.progress import ProgressComment
from coding_agent.agent.steering.continuation import Continuation
from coding_agent.agent.steering.pause import ShutdownSignal, pause_signal_path
from coding_agent.config import AgentConfig
from coding_agent.context.storage import RunContextFiles
from coding_agent.domain.ports import RunStore
from coding_agent.domain.runs import PausedWork
from coding_agent.domain.tasks import Task
from coding_agent.redaction import Redactor
from coding_agent.sources.base import Source

__all__ = ["RunControls", "RunScope", "StoreCall", "in_thread"]

# How a run calls its store: `await stored(store.method, *args)`, the blocking call in a
# worker thread (the runner's is `RunLedger.stored`, which waits through an outage).
StoreCall = Callable[..., Awaitable[Any]]


async def _no_work() -> PausedWork | None:
    return None


async def in_thread(call: Callable[..., Any], *args: Any) -> Any:
    """A `StoreCall` that only moves the call off the event loop (parts made alone, in tests)."""
    return await asyncio.to_thread(call, *args)


class RunControls:
    """What the runs of one worker process share; one per process."""

    def __init__(
        self,
        config: AgentConfig,
        store: RunStore,
        redactor: Redactor,
        owner: str,
        shutdown: ShutdownSignal | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.config = config
        self.store = store
        self.redactor = redactor
        self.owner = owner
        self.shutdown = shutdown or ShutdownSignal()
        self.signal_file = pause_signal_path(config)
        self.clock = clock
        # The daily budgets (SPEC 11.5), set by the runtime: (task key, requester) -> the
        # comment of the budget that holds the task's run now, or None. A blocking store read.
        self.budget: Callable[[str, str | None], str | None] | None = None
        # The runs of this process by task key, for webhooks to steer (`nudge`).
        self.active: weakref.WeakValueDictionary[str, Any] = weakref.WeakValueDictionary()

    def nudge(self, task_key: str) -> bool:
        """A webhook reported a comment or an (un)assignment on `task_key`: its run here,
        if any, asks the forge at its next checkpoint. False when no run of it is here."""
        control = self.active.get(task_key)
        if control is None:
            return False
        control.nudge()
        return True


@dataclass
class RunScope:
    """One run, as every steering part sees it."""

    controls: RunControls
    source: Source
    task: Task
    files: RunContextFiles
    workspace: Path
    requester: str | None
    continuation: Continuation | None
    steps: int = 0
    progress: ProgressComment | None = None
    # Planning mode (SPEC 10.4) plugs in here: where the run stands (for the stop
    # comment) and its state (saved with every checkpoint and pause).
    describe_position: Callable[[], str] = lambda: ""
    planning_state: Callable[[], dict[str, Any] | None] = lambda: None
    # The runner plugs in its workspace's pause (SPEC 8.3): the WIP commit, pushed.
    save_work: Callable[[], Awaitable[PausedWork | None]] = _no_work
    # Every store call of the run's parts: held through an outage of the store.
    stored: StoreCall = in_thread

    @property
    def key(self) -> str:
        return str(self.task.key)

    @property
    def run_uuid(self) -> str:
        return self.files.run_uuid

    @property
    def store(self) -> RunStore:
        return self.controls.store

    @property
    def redactor(self) -> Redactor:
        return self.controls.redactor

    @property
    def config(self) -> AgentConfig:
        return self.controls.config

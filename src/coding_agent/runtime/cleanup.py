"""Retention (SPEC 9.3): completed contexts older than `context_storage.cleanup_days` go.

A context's age is the last time its run wrote `metadata.json` (its end, for a
completed run), falling back to the directory's modification time. Only `completed/` is
touched: running and paused contexts are still needed. Thread memories past the same age
go too; the repository memories stay until `coding-agent memory clear`.

`serve` runs it once a day (`Cleanup.maybe_run`); `coding-agent cleanup` runs it now.
"""

from __future__ import annotations

import json
import logging
import shutil
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from coding_agent.config import AgentConfig
from coding_agent.runtime.memory_store import MemoryStore
from coding_agent.runtime.state_store import StateStore

__all__ = ["Cleanup", "CleanupReport", "context_age_reference"]

log = logging.getLogger(__name__)

DAY = 86400.0


@dataclass(frozen=True)
class CleanupReport:
    contexts_removed: int
    thread_memories_removed: int


def context_age_reference(directory: Path) -> float:
    """When the run behind `directory` last wrote its metadata (else the directory's mtime)."""
    try:
        metadata = json.loads((directory / "metadata.json").read_text(encoding="utf-8"))
        return float(metadata["updated_at"])
    except (OSError, ValueError, KeyError, TypeError):
        return directory.stat().st_mtime


class Cleanup:
    """Removes what is past retention; `every_seconds` spaces the runs of `maybe_run`."""

    def __init__(
        self,
        config: AgentConfig,
        store: StateStore,
        clock: Callable[[], float] = time.time,
        every_seconds: float = DAY,
    ) -> None:
        self._completed = Path(config.context_storage.base_dir) / "completed"
        self._max_age = config.context_storage.cleanup_days * DAY
        self._memories = MemoryStore(store.engine, clock)
        self._clock = clock
        self._every = every_seconds
        self._last: float | None = None

    def run(self) -> CleanupReport:
        cutoff = self._clock() - self._max_age
        removed = 0
        if self._completed.is_dir():
            for directory in sorted(self._completed.iterdir()):
                if directory.is_dir() and context_age_reference(directory) < cutoff:
                    shutil.rmtree(directory, ignore_errors=True)
                    removed += 1
        threads = self._memories.forget_threads_before(cutoff)
        self._last = self._clock()
        if removed or threads:
            log.info("cleanup: %d completed context(s) and %d thread memorie(s) removed", removed, threads)
        return CleanupReport(removed, threads)

    def maybe_run(self) -> CleanupReport | None:
        """`run` if it has not run in the last `every_seconds` (in this process)."""
        if self._last is not None and self._clock() - self._last < self._every:
            return None
        return self.run()

"""Retention (SPEC 9.3): completed contexts older than `context_storage.cleanup_days` go.

A context's age is the last time its run wrote `metadata.json` (its end, for a
completed run), falling back to the directory's modification time. Only `completed/` is
touched: running and paused contexts are still needed. Thread memories past the same age
go too; the repository memories stay until `coding-agent memory clear`.

Clones: a run deletes its own clone when it ends, but a clone it left on another machine
stays there — a run paused on machine A keeps its clone on A, resumes on B (from the WIP
commit on its branch) and ends there. The sweep deletes each clone under
`workspace.base_dir` (and its git directory beside it) whose run the state store shows
ended (done, failed, stopped, abandoned); running and paused runs' clones, and names the
store does not know, stay. `workspace.keep_finished: true` turns the sweep off.

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
from coding_agent.store.memories import MemoryStore
from coding_agent.store.state import StateStore
from coding_agent.tools.host_git import git_dirs_beside
from coding_agent.workspace.checkout import discard_clone

__all__ = ["Cleanup", "CleanupReport", "context_age_reference"]

log = logging.getLogger(__name__)

DAY = 86400.0
# Run statuses after which nothing reads the run's clone again (a paused run's is kept).
ENDED_RUN_STATUSES = frozenset({"done", "failed", "stopped", "abandoned"})


@dataclass(frozen=True)
class CleanupReport:
    contexts_removed: int
    thread_memories_removed: int
    clones_removed: int = 0


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
        self._store = store
        self._workspaces = None if config.workspace.keep_finished else Path(config.workspace.base_dir).resolve()
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
        clones = self._sweep_clones()
        self._last = self._clock()
        if removed or threads or clones:
            log.info(
                "cleanup: %d completed context(s), %d thread memorie(s) and %d ended run(s)' clone(s) removed",
                removed,
                threads,
                clones,
            )
        return CleanupReport(removed, threads, clones)

    def _sweep_clones(self) -> int:
        """Delete the clones (and git directories) of runs the store shows ended."""
        if self._workspaces is None:
            return 0
        names: set[str] = set()
        for base in (self._workspaces, git_dirs_beside(self._workspaces)):
            if base.is_dir():
                # A link is never followed out of the base: only real directories count.
                names |= {entry.name for entry in base.iterdir() if entry.is_dir() and not entry.is_symlink()}
        removed = 0
        for name in sorted(names):
            run = self._store.runs.get_run(name)
            if run is not None and run.status in ENDED_RUN_STATUSES:
                discard_clone(self._workspaces / name)
                removed += 1
        return removed

    def maybe_run(self) -> CleanupReport | None:
        """`run` if it has not run in the last `every_seconds` (in this process)."""
        if self._last is not None and self._clock() - self._last < self._every:
            return None
        return self.run()

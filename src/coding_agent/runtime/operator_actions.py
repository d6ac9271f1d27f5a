"""Pause, resume and stop one task by its key: the one implementation behind both the
CLI (`coding-agent pause|resume|stop TASK`) and the dashboard's buttons and API
(`POST /api/tasks/{key}/pause|resume|stop`), so both act exactly alike (SPEC 8.3, 11.3).

They only write requests into the state store; the process running the task acts on
them at its next step, and a resumed or stopped paused run is continued by the next
poll of a running `serve` (or by the CLI itself, which continues it at once).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from coding_agent.domain.ci import WatchState
from coding_agent.store.state import StateStore

__all__ = ["Action", "ActionResult", "UnknownTask", "apply_action"]

Action = Literal["pause", "resume", "stop"]


class UnknownTask(LookupError):
    """The task has no run in a state the action applies to (404 in the API)."""


@dataclass(frozen=True)
class ActionResult:
    """What was requested, and whether a paused run now waits to be continued."""

    message: str
    continue_now: bool


def apply_action(store: StateStore, key: str, action: Action) -> ActionResult:
    """Request `action` on the task `key`; raises UnknownTask when nothing can take it."""
    running = store.runs.runs_with_status("running", key)
    paused = store.runs.runs_with_status("paused", key)
    if action == "pause":
        if running:
            store.steering.request_control(key, "pause")
            return ActionResult(f"{key}: pause requested; it pauses at its next step", False)
        if not _waiting_on_ci(store, key):
            raise UnknownTask(f"{key} has no running run to pause")
        store.steering.request_control(key, "pause")
        return ActionResult(f"{key}: paused; its CI watch acts on nothing until resumed", False)
    if action == "resume":
        if not paused:
            if _waiting_on_ci(store, key) and store.steering.control_request(key) == "pause":
                store.steering.clear_control_request(key)
                return ActionResult(f"{key}: resumed; its CI watch acts again", False)
            raise UnknownTask(f"{key} has no paused run")
        store.steering.release_holds(key)
        return ActionResult(f"{key}: resume requested; it continues from its next step", True)
    if not running and not paused:
        raise UnknownTask(f"{key} has no running or paused run to stop")
    store.steering.request_control(key, "stop")
    if paused:
        store.steering.release_holds(key)
    if running:
        return ActionResult(f"{key}: stop requested; it stops at its next step", False)
    return ActionResult(f"{key}: stop requested; the paused run is stopped", True)


def _waiting_on_ci(store: StateStore, key: str) -> bool:
    """Whether `key` is a done task whose CI watch may still act (SPEC 16): its pause is
    a request the watch honours (a pause holds the watch) until the task is resumed."""
    watch = store.ci_watches.watch(key)
    return watch is not None and watch.state in (WatchState.WATCHING, WatchState.RERUN, WatchState.FIX)

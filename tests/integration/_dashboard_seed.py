"""A state store holding tasks in every state the dashboard shows (done with a PR,
failed, stopped, paused, running, waiting), written through the store's own methods as
the runtime writes them: for the dashboard's browser tests and its screenshots.


A running planned task gets a context directory with a plan (the runner's
`task_state.json` and `tools.jsonl` formats), so its page shows a checklist.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from coding_agent.agent.planning.models import Action, Goal, Plan, PlanningState
from coding_agent.agent.planning.state import dump_state
from coding_agent.agent.steering.state import STATE_FILE
from coding_agent.store.queue_entries import QueueEntries
from coding_agent.store.state import StateStore

__all__ = ["SeededTasks", "seed_every_state", "write_plan", "HOSTILE_TITLE"]

FORGE = "https://github.example"
# An image with a handler, a script, non-ASCII text, and 300 characters in all.
HOSTILE_TITLE = ('<img src=x onerror="window.__pwned=1"><script>window.__pwned=2</script> Ünïcödé 設定ファイル ✓ '
                 + "long title " * 40)[:300]  # fmt: skip


@dataclass(frozen=True)
class SeededTasks:
    done: str
    failed: str
    stopped: str
    paused: str
    running: str
    waiting: str
    hostile: str
    running_run: str


def _note(store: StateStore, key: str, title: str) -> None:
    project, number = key.split(":", 1)[1].split("#")
    store.tasks.note_task(key, title, f"{FORGE}/{project}/issues/{number}")


def _run(store: StateStore, key: str, run: str, requester: str, steps: int, tokens: tuple[int, int]) -> None:
    store.runs.start_run(run, key, "worker-a", requester)
    store.runs.heartbeat(key, "worker-a", 600, run, steps=steps, usages=[tokens])


def seed_every_state(store: StateStore, queue_scope: str = "memory:seed") -> SeededTasks:
    """One task per state on two repositories, plus a waiting one with a hostile title."""
    tasks = SeededTasks(
        done="github:acme/widgets#1", failed="github:acme/widgets#2", stopped="github:acme/gadgets#3",
        paused="github:acme/gadgets#4", running="github:acme/widgets#5", waiting="github:acme/widgets#6",
        hostile="github:acme/gadgets#7", running_run="run-running",
    )  # fmt: skip
    _note(store, tasks.done, "Add a --json flag to the export command")
    _run(store, tasks.done, "run-done", "alice", 8, (20000, 2478))
    store.tasks.note_change(tasks.done, f"{FORGE}/acme/widgets/pull/11")
    store.runs.finish_run("run-done", "done", 8)
    _note(store, tasks.failed, "Fix the flaky date parser")
    _run(store, tasks.failed, "run-failed", "carol", 14, (40000, 6304))
    store.runs.finish_run("run-failed", "failed", 14, error="The model was stuck: it repeated workspace/run 5 times in a row with the same result, so the run was stopped.")
    _note(store, tasks.stopped, "Refactor the configuration loader")
    _run(store, tasks.stopped, "run-stopped", "alice", 13, (40000, 4156))
    store.steering.record_final("run-stopped", "stopped", "## ⛔ Task stopped\n\nAn operator stopped the coding agent (`coding-agent stop`).\n\n**Stopped at:** now")
    store.runs.finish_run("run-stopped", "stopped", 13)
    _note(store, tasks.paused, "Document the plugin API")
    _run(store, tasks.paused, "run-paused", "bob", 4, (9000, 1222))
    store.steering.pause_run("run-paused", 4, hold=True)
    _note(store, tasks.running, "Speed up the CSV import")
    _run(store, tasks.running, tasks.running_run, "carol", 5, (12000, 2402))
    entries = QueueEntries(store.engine, queue_scope, stale_seconds=3600)
    for key, title in ((tasks.waiting, "Translate the README into Japanese: 日本語"), (tasks.hostile, HOSTILE_TITLE)):
        _note(store, key, title)
        entries.try_enqueue(key)
    return tasks


def write_plan(contexts: Path, run: str, done: int, total: int, phase: str = "execution") -> Path:
    """A running run's context directory with a plan: `done` actions done, the next running."""
    directory = contexts / "running" / run
    directory.mkdir(parents=True, exist_ok=True)
    actions = [
        Action(f"a{i}", f"Write config module part {i}", status="done" if i <= done else "running" if i == done + 1 else "pending")
        for i in range(1, total + 1)
    ]
    plan = Plan(Goal("Refactor the configuration loader", ["tests pass"]), [], "", actions)
    state = PlanningState(phase=phase, plan=plan, action_index=done, action_step=2)  # type: ignore[arg-type]
    document = {"steps": 5 + done, "planning": dump_state(state)}
    (directory / STATE_FILE).write_text(json.dumps(document), encoding="utf-8")
    record = {"at": 1_790_000_000, "tool": "workspace/create", "args": {"path": "config/part1.py"}, "is_error": False, "result": "Created"}
    (directory / "tools.jsonl").write_text(json.dumps(record) + "\n", encoding="utf-8")
    return directory

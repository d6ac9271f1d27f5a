"""What the dashboard and its API show of the state store: plain dicts, the same data for
the HTML pages, the JSON API and the live updates. Every text passes the redactor, so a
secret that reached a stored error never reaches a page."""

from __future__ import annotations

from datetime import datetime, timezone
from typing import Any

from coding_agent.domain.runs import RunRecord
from coding_agent.redaction import Redactor
from coding_agent.runtime.budgets import Budgets
from coding_agent.runtime.state_store import StateStore
from coding_agent.web.activity import RunActivity

__all__ = ["task_list", "task_detail", "usage"]


def _stamp(value: float | None) -> str | None:
    return None if value is None else datetime.fromtimestamp(value, timezone.utc).isoformat(timespec="seconds")


def _run(record: RunRecord, redactor: Redactor) -> dict[str, Any]:
    return {
        "run": record.uuid,
        "task": record.task_key,
        "state": record.status,
        "requester": record.requester,
        "steps": record.steps,
        "prompt_tokens": record.prompt_tokens,
        "completion_tokens": record.completion_tokens,
        "tokens": record.prompt_tokens + record.completion_tokens,
        "started_at": _stamp(record.started_at),
        "finished_at": _stamp(record.finished_at),
        "error": redactor.text(record.error) if record.error else None,
    }


def task_list(store: StateStore, redactor: Redactor) -> list[dict[str, Any]]:
    """One row per task: its latest run (state, requester, steps, tokens, start and end)."""
    latest: dict[str, RunRecord] = {}
    for record in store.runs():
        current = latest.get(record.task_key)
        if current is None or record.started_at >= current.started_at:
            latest[record.task_key] = record
    rows = [_run(record, redactor) for record in latest.values()]
    return sorted(rows, key=lambda row: row["started_at"] or "", reverse=True)


def task_detail(
    store: StateStore, key: str, redactor: Redactor, activity: RunActivity | None = None
) -> dict[str, Any] | None:
    """The task with every run, newest first; None when the store has never seen it.

    With `activity`: the latest run's `tool_calls`, `comments` and `plan` (read from its
    context directory; see `activity.py`)."""
    runs = sorted(store.runs(key), key=lambda record: record.started_at, reverse=True)
    if not runs:
        return None
    detail = {**_run(runs[0], redactor), "runs": [_run(record, redactor) for record in runs]}
    if activity is not None:
        latest = runs[0]
        final_body = store.run_marks(latest.uuid).final_body
        label = None if latest.status in ("running", "paused") else latest.status
        detail.update(activity.of_run(latest.uuid, final_body, label))
    return detail


def usage(store: StateStore, budgets: Budgets | None = None) -> dict[str, Any]:
    """Token use per task and per requester, over all runs; with `budgets`, each requester
    and repository has a `budget` object too: today's use and what is left of each daily
    budget (SPEC 11.5), `{name: {used, limit, left, resets_at}}` (limit, left null: none)."""
    per_task: dict[str, dict[str, Any]] = {}
    per_requester: dict[str, dict[str, Any]] = {}
    for record in store.runs():
        for table, name in ((per_task, record.task_key), (per_requester, record.requester or "(unknown)")):
            entry = table.setdefault(name, {"prompt_tokens": 0, "completion_tokens": 0, "runs": 0})
            entry["prompt_tokens"] += record.prompt_tokens
            entry["completion_tokens"] += record.completion_tokens
            entry["runs"] += 1
    if budgets is None:
        return {"tasks": per_task, "requesters": per_requester}
    today = budgets.usage(requesters=per_requester)
    for name, entry in per_requester.items():
        entry["budget"] = today["requesters"][name]
    repositories = {name: {"budget": budget} for name, budget in today["repositories"].items()}
    return {"tasks": per_task, "requesters": per_requester, "repositories": repositories}

"""What the dashboard, its API and `status` show of the state store: plain dicts, the same
data for the HTML pages, the JSON API and the live updates. Every text passes the
redactor, so a secret that reached a stored error never reaches a page.

A task is its latest run, named by what the task is (title, repository, kind, links; the
`task_facts` the runtime records), or a key waiting in the queue that no worker took yet.
"""

from __future__ import annotations

import functools
import re
import time
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from coding_agent.domain.runs import RunRecord
from coding_agent.domain.tasks import TaskKey
from coding_agent.redaction import Redactor
from coding_agent.runtime.budgets import Budgets, repository_of
from coding_agent.store.state import StateStore
from coding_agent.store.task_facts import TaskFact
from coding_agent.web.activity import RunActivity

__all__ = ["STATES", "TaskFilter", "task_list", "task_detail", "usage", "one_line", "UnknownFilter"]

STATES = ("waiting", "running", "paused", "done", "failed", "stopped", "abandoned")
ENDED = frozenset({"done", "failed", "stopped", "abandoned"})
REASON_CHARS = 200
_MARKUP = re.compile(r"\*\*|__|`")


class UnknownFilter(ValueError):
    """A filter value the list cannot apply (the API answers 400 with this text)."""


@dataclass(frozen=True)
class TaskFilter:
    """Which tasks to list: exact matches; None matches all."""

    state: str | None = None
    repository: str | None = None
    requester: str | None = None

    @classmethod
    def of(cls, params: dict[str, str]) -> TaskFilter:
        """From query parameters; an unknown state is an `UnknownFilter` naming it."""
        state = params.get("state") or None
        if state is not None and state not in STATES:
            raise UnknownFilter(f"unknown state {state[:40]!r}: one of {', '.join(STATES)}")
        return cls(state, params.get("repository") or None, params.get("requester") or None)

    def admits(self, row: dict[str, Any]) -> bool:
        return (
            (self.state is None or row["state"] == self.state)
            and (self.repository is None or row["repository"] == self.repository)
            and (self.requester is None or row["requester"] == self.requester)
        )


def _stamp(value: float | None) -> str | None:
    return None if value is None else datetime.fromtimestamp(value, UTC).isoformat(timespec="seconds")


def one_line(text: str, limit: int = REASON_CHARS) -> str:
    """The first line of `text` that says something (no heading, no Markdown emphasis),
    cut to `limit` characters: a failure's or a stop's reason in a table row."""
    for line in text.splitlines():
        line = _MARKUP.sub("", line).strip()
        if line and not line.startswith("#"):
            line = " ".join(line.split())
            return line if len(line) <= limit else line[: limit - 1] + "…"
    return ""


@functools.lru_cache(maxsize=8192)
def _what(key: str) -> dict[str, str]:
    """Repository, forge and kind from the key (`github:acme/widgets#3`: an issue)."""
    try:
        parsed = TaskKey.parse(key)
    except ValueError:
        return {"repository": "", "forge": "", "kind": ""}
    kind = "issue" if not parsed.is_change else ("PR" if parsed.forge == "github" else "MR")
    return {"repository": parsed.project, "forge": parsed.forge, "kind": kind}  # shared: never changed by callers


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
        "started": record.started_at,
        "finished": record.finished_at,
        "error": redactor.text(record.error) if record.error else None,
    }


def _task(
    key: str,
    record: RunRecord | None,
    fact: TaskFact | None,
    redactor: Redactor,
    now: float,
    queued: tuple[int, float] | None = None,
) -> dict[str, Any]:
    """One task as every view shows it: its latest run (if any) and what the task is."""
    fact = fact or TaskFact()
    what = _what(key)
    row: dict[str, Any] = {
        "task": key,
        **what,
        "title": redactor.text(fact.title) if fact.title else None,
        "url": fact.url,
        "change_url": fact.change_url or (fact.url if what["kind"] in ("PR", "MR") else None),
        "requester": None, "run": None, "steps": 0, "tokens": 0, "prompt_tokens": 0, "completion_tokens": 0,
        "started_at": None, "finished_at": None, "started": None, "finished": None, "error": None,
        "reason": None, "doing": None, "queue_position": None, "queued_at": None, "queued": None,
        "budget_left": None,  # the task page's: what its requester and repository have left today
        "ci": None,  # its CI watch (SPEC 16): waiting, passed, failed N/M fix attempts ...
    }  # fmt: skip
    if record is not None:
        row.update(_run(record, redactor))
    if queued is not None:
        place, at = queued
        row.update(
            state="waiting", queue_position=place, queued_at=_stamp(at), queued=at, doing=f"waiting in the queue (#{place})"
        )
    end = row["finished"] if row["state"] in ENDED else None
    row["elapsed_seconds"] = None if row["started"] is None else round((end or now) - row["started"], 1)
    return row


def _reason(row: dict[str, Any], final_body: str | None) -> str | None:
    if row["state"] not in ("failed", "stopped", "abandoned"):
        return None
    text = row["error"] or (final_body and final_body.replace("⛔", "")) or ""
    return one_line(text) or row["state"]


def task_list(
    store: StateStore,
    redactor: Redactor,
    activity: RunActivity | None = None,
    only: TaskFilter = TaskFilter(),
    now: float | None = None,
) -> list[dict[str, Any]]:
    """Every task (its latest run) and every key waiting in the queue: the waiting first,
    in queue order, then the rest by start, newest first. `only`: the filter applied."""
    now = time.time() if now is None else now
    latest = {record.task_key: record for record in store.runs.latest_runs()}
    facts = store.tasks.task_facts()
    waiting = {key: (place, at) for place, (key, at) in enumerate(store.tasks.queued_tasks(), start=1)}
    keys = list(dict.fromkeys([*waiting, *latest]))
    rows = [_task(key, latest.get(key), facts.get(key), redactor, now, waiting.get(key)) for key in keys]
    _add_ci(rows, store)
    shown = [row for row in rows if only.admits(row)]
    ended = [row["run"] for row in shown if row["state"] in ("stopped", "failed", "abandoned") and not row["error"]]
    bodies = store.steering.final_bodies(ended) if ended else {}
    for row in shown:
        row["reason"] = _reason(row, bodies.get(row["run"]))
        if activity is not None and row["state"] in ("running", "paused") and row["run"]:
            row["doing"] = activity.doing(row["run"])
    shown.sort(key=_order)
    return shown


def _add_ci(rows: list[dict[str, Any]], store: StateStore) -> None:
    """Each task's CI state (SPEC 16), from one read of the watches."""
    watches = store.ci_watches.every_watch()
    for row in rows:
        watch = watches.get(row["task"])
        row["ci"] = watch.shown if watch is not None else None


def _order(row: dict[str, Any]) -> tuple[int, float]:
    """Waiting tasks in queue order, then running and paused ones, then the ended, each
    newest first."""
    if row["queue_position"] is not None:
        return 0, row["queue_position"]
    return (1 if row["state"] in ("running", "paused") else 2), -(row["started"] or 0)


def _actions(state: str, requested: str | None) -> dict[str, bool]:
    """Which buttons apply now (as `runtime/operator_actions.py` would accept them)."""
    return {
        "pause": state == "running" and requested is None,
        "resume": state == "paused",
        "stop": state in ("running", "paused") and requested != "stop",
    }


def task_detail(
    store: StateStore,
    key: str,
    redactor: Redactor,
    activity: RunActivity | None = None,
    budgets: Budgets | None = None,
) -> dict[str, Any] | None:
    """The task with every run, newest first; None when the store has never seen it
    (neither run nor queued).

    With `activity`: the latest run's `tool_calls`, `comments` and `plan` (read from its
    context directory; see `activity.py`). Everything comes from one read of the store,
    so the header, the runs and the plan never disagree."""
    now = time.time()
    runs = sorted(store.runs.all(key), key=lambda record: record.started_at, reverse=True)
    queue = store.tasks.queued_tasks()
    queued = next(((place, at) for place, (queued_key, at) in enumerate(queue, start=1) if queued_key == key), None)
    if not runs and queued is None:
        return None
    latest = runs[0] if runs else None
    detail = _task(key, latest, store.tasks.task_fact(key), redactor, now, queued)
    watch = store.ci_watches.watch(key)
    detail["ci"] = watch.shown if watch is not None else None
    marks = store.steering.run_marks(latest.uuid) if latest is not None else None
    detail["reason"] = _reason(detail, marks.final_body if marks else None)
    detail["runs"] = [_run(record, redactor) for record in runs]
    requested = store.steering.control_request(key) if detail["state"] in ("running", "paused") else None
    detail["requested"] = requested
    detail["actions"] = _actions(detail["state"], requested)
    if budgets is not None and budgets.enabled:
        starter = runs[-1].requester if runs else None  # who pays for every run of the task
        detail["budget_left"] = _budget_left(budgets.usage(), starter, key)
    detail.update({"tool_calls": [], "comments": [], "plan": None})
    if activity is not None and latest is not None:
        label = None if latest.status in ("running", "paused") else latest.status
        detail.update(activity.of_run(latest.uuid, marks.final_body if marks else None, label))
        if detail["plan"] is not None:
            detail["plan"]["steps"] = detail["steps"]  # the store's count, as the header shows it
        if detail["state"] in ("running", "paused"):
            detail["doing"] = activity.doing(latest.uuid)
    return detail


def _add(table: dict[str, dict[str, Any]], name: str, record: RunRecord) -> None:
    entry = table.setdefault(name, {"prompt_tokens": 0, "completion_tokens": 0, "tokens": 0, "runs": 0})
    entry["prompt_tokens"] += record.prompt_tokens
    entry["completion_tokens"] += record.completion_tokens
    entry["tokens"] += record.prompt_tokens + record.completion_tokens
    entry["runs"] += 1


def usage(store: StateStore, budgets: Budgets | None = None) -> dict[str, Any]:
    """Token use per task, per requester and per repository over all runs, with totals;
    with `budgets`, each requester and repository has a `budget` object too: today's use
    and what is left of each daily budget (SPEC 11.5), `{name: {used, limit, left,
    resets_at}}` (limit and left null: no such budget)."""
    tables: dict[str, dict[str, dict[str, Any]]] = {"tasks": {}, "requesters": {}, "repositories": {}}
    total = {"prompt_tokens": 0, "completion_tokens": 0, "tokens": 0, "runs": 0}
    for record in store.runs.all():
        _add(tables["tasks"], record.task_key, record)
        _add(tables["requesters"], record.requester or "(unknown)", record)
        _add(tables["repositories"], _what(record.task_key)["repository"] or "(unknown)", record)
        for name, value in (("prompt_tokens", record.prompt_tokens), ("completion_tokens", record.completion_tokens)):
            total[name] += value
        total["tokens"] += record.prompt_tokens + record.completion_tokens
        total["runs"] += 1
    ordered = {
        name: dict(sorted(table.items(), key=lambda item: (-item[1]["tokens"], item[0]))) for name, table in tables.items()
    }
    result = {**ordered, "total": total}
    if budgets is not None:
        _add_budgets(result, budgets)
    return result


def budget_text(budget: dict[str, dict[str, Any]] | None) -> str | None:
    """What is left today of each set budget in one `usage()` entry, as a person reads it
    (`1,200 of 5,000 tokens · 2 of 3 runs`); None where no budget is set."""
    parts = [
        f"{entry['left']:,} of {entry['limit']:,} {name.split('_')[0]}"
        for name, entry in (budget or {}).items()
        if entry["limit"] is not None
    ]
    return " · ".join(parts) or None


def _budget_left(today: dict[str, Any], requester: str | None, key: str) -> str | None:
    """The task's requester's and repository's budgets left today, in one line."""
    parts = [
        (who, budget_text(today[table].get(name)))
        for who, table, name in (
            ("requester", "requesters", requester),
            ("repository", "repositories", repository_of(key) if _what(key)["repository"] else None),
        )
        if name is not None
    ]
    return "; ".join(f"{text} ({who})" for who, text in parts if text) or None


def _add_budgets(result: dict[str, Any], budgets: Budgets) -> None:
    result["budgets_set"] = budgets.enabled
    today = budgets.usage(requesters=result["requesters"])
    for name, entry in result["requesters"].items():
        entry["budget"] = today["requesters"].get(name)
        entry["budget_left"] = budget_text(entry["budget"])
    for name, budget in today["repositories"].items():  # named `forge:owner/repo` there
        project = name.split(":", 1)[-1]
        empty = {"prompt_tokens": 0, "completion_tokens": 0, "tokens": 0, "runs": 0}
        entry = result["repositories"].setdefault(project, empty)
        entry.update(budget=budget, budget_left=budget_text(budget))

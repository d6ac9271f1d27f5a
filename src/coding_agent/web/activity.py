"""What a run did, as the task page shows it (SPEC 11.3, 10.5): its tool calls, the
comments it saw and posted, and, for a planned run, the plan's checklist.

Everything is read from the records the run writes in its context directory
(`context_storage.base_dir`): `tools.jsonl`, `comments.jsonl` and `task_state.json`,
never from its prompts, whose wording can change freely. No forge request is made per
page view, so the dashboard works without forge tokens.

- tool calls: `tools.jsonl` (name, arguments, error or not, a short result, time);
- comments seen and answered: `comments.jsonl`, one record per comment as the run read it
  (the first turn's conversation, the bot's own earlier answers marked, then each new
  comment sent to the model); comments posted: the step notes of the progress comment
  (the saved state's `progress`, `task_state.json` or its journal's last line) and the
  final comment the state store keeps to publish (`run_marks.final_body`). A run recorded
  before `comments.jsonl` existed shows no comments seen, only those it posted: its
  prompts are not parsed;
- the plan: the saved state's `planning`, read with `load_planning_state`, as data (one
  item per action with its status): the page renders it as a checklist, never as the
  progress comment's Markdown.

The files are already redacted when written; every text is redacted again here (with the
dashboard's secrets) before it is shortened, so a secret cut in half can never slip past
the redactor. Files are parsed again only when their size or mtime changes: the live
stream asks every half second.
"""

from __future__ import annotations

import json
from collections import OrderedDict
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from coding_agent.agent.planning import PlanningStateError, load_planning_state
from coding_agent.agent.planning.checklist import position
from coding_agent.agent.steering.state import JOURNAL_FILE, STATE_FILE, load_state_document
from coding_agent.context.storage import COMMENTS_FILE
from coding_agent.redaction import Redactor

__all__ = ["RunActivity", "shorten"]

STATES = ("running", "paused", "completed")
MAX_TOOL_CALLS = 200
MAX_COMMENTS = 100
ARGS_CHARS = 200
RESULT_CHARS = 300
COMMENT_CHARS = 2000


def shorten(text: str, limit: int, redactor: Redactor) -> str:
    """`text` redacted, then cut to `limit` characters (redaction first: a cut secret
    would no longer match)."""
    text = redactor.text(text)
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _stamp(value: Any) -> str | None:
    if not isinstance(value, (int, float)):
        return None
    return datetime.fromtimestamp(value, UTC).isoformat(timespec="seconds")


def _jsonl(path: Path) -> list[dict[str, Any]]:
    records = []
    try:
        with path.open(encoding="utf-8") as handle:
            for line in handle:
                try:
                    record = json.loads(line)
                except ValueError:
                    continue  # a line being written right now
                if isinstance(record, dict):
                    records.append(record)
    except OSError:
        return []
    return records


def comments_seen(records: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The comments the run read, from its `comments.jsonl` records (`RunContextFiles.
    record_comments`): the first turn's conversation, then those that arrived, in the
    order it read them. A comment recorded twice (a run that died after recording a
    new comment and read it again when continued) is shown once."""
    found: list[dict[str, Any]] = []
    ids: set[str] = set()
    for record in records:
        key = str(record.get("id") or "")
        if key and key in ids:
            continue
        ids.add(key)
        at = record.get("created_at")
        found.append(
            {
                "author": str(record.get("author") or ""),
                "at": at if isinstance(at, str) and at else None,
                "body": str(record.get("body") or "").strip() or "(empty)",
                "posted": bool(record.get("own")),
            }
        )
    return found


# Parsed files kept (the least recently read go first): three per run a page shows, and
# one per run the task list describes as it runs; a file of a run that ended is not read
# again once its page is closed, so a long `serve` needs no more than the runs watched.
PARSED_FILES = 64


class RunActivity:
    """Reads runs' context directories under `base_dir`; one instance per dashboard."""

    def __init__(self, base_dir: Path, redactor: Redactor, max_steps_per_action: int) -> None:
        self._base = base_dir
        self._redactor = redactor
        self._max_steps = max_steps_per_action
        self._cache: OrderedDict[tuple[Path, str], tuple[tuple[int, int], Any]] = OrderedDict()

    def directory(self, run_uuid: str) -> Path | None:
        if not run_uuid or "/" in run_uuid or run_uuid.startswith("."):
            return None
        for state in STATES:
            candidate = self._base / state / run_uuid
            if candidate.is_dir():
                return candidate
        return None

    def _cached(self, path: Path, kind: str, parse: Any) -> Any:
        try:
            stat = path.stat()
        except OSError:
            return parse(None)
        signature = (stat.st_size, stat.st_mtime_ns)
        hit = self._cache.get((path, kind))
        if hit is not None and hit[0] == signature:
            self._cache.move_to_end((path, kind))
            return hit[1]
        value = parse(path)
        self._cache[(path, kind)] = (signature, value)
        self._cache.move_to_end((path, kind))
        while len(self._cache) > PARSED_FILES:
            self._cache.popitem(last=False)
        return value

    def tool_calls(self, directory: Path) -> list[dict[str, Any]]:
        records = self._cached(directory / "tools.jsonl", "tools", lambda p: _jsonl(p) if p else [])
        return [self._tool_call(record) for record in records[-MAX_TOOL_CALLS:]]

    def _tool_call(self, record: dict[str, Any]) -> dict[str, Any]:
        args = json.dumps(record.get("args"), ensure_ascii=False, default=str)
        return {
            "tool": shorten(str(record.get("tool") or ""), 100, self._redactor),
            "args": shorten(args, ARGS_CHARS, self._redactor),
            "status": "error" if record.get("is_error") else "ok",
            "result": shorten(str(record.get("result") or ""), RESULT_CHARS, self._redactor),
            "output_chars": record.get("output_chars"),
            "at": _stamp(record.get("at")),
            "duration_seconds": record.get("duration_seconds"),
        }

    def _state(self, directory: Path) -> dict[str, Any]:
        # The document only (`load_state_document`): its history (messages.jsonl has it)
        # is not needed here. The newest checkpoint is the journal's last line when there
        # is a journal, so the cache follows whichever file changes at each step.
        journal = directory / JOURNAL_FILE
        watched = journal if journal.exists() else directory / STATE_FILE
        return self._cached(watched, "state", lambda path: (load_state_document(directory) or {}) if path else {})

    def comments(self, directory: Path, final_body: str | None) -> list[dict[str, Any]]:
        seen = self._cached(directory / COMMENTS_FILE, "comments", lambda p: comments_seen(_jsonl(p)) if p else [])
        progress = self._state(directory).get("progress") or {}
        notes = progress.get("notes") if isinstance(progress, dict) else None
        posted = [
            {"author": "(this run)", "at": None, "body": str(note[1]), "posted": True, "step": note[0]}
            for note in (notes if isinstance(notes, list) else [])
            if isinstance(note, list) and len(note) == 2
        ]
        if final_body:
            posted.append({"author": "(this run)", "at": None, "body": final_body, "posted": True, "final": True})
        return [
            {
                **comment,
                "author": shorten(str(comment["author"]), 100, self._redactor),
                "body": shorten(str(comment["body"]).strip(), COMMENT_CHARS, self._redactor),
            }
            for comment in [*seen, *posted][-MAX_COMMENTS:]
        ]

    def plan(self, directory: Path, label: str | None = None) -> dict[str, Any] | None:
        """The checklist of a planned run (None for a run without a plan) as data, not
        Markdown: the goal, the phase, counts, and one item per action with its status.
        `label`: the phase shown instead of the saved one (the run's end: done, failed,
        stopped); then no action is shown as in progress any more."""
        state_document = self._state(directory)
        raw = state_document.get("planning")
        if raw is None:
            return None
        try:
            state = load_planning_state(raw)
        except PlanningStateError as error:
            return {"goal": "", "phase": label or "", "items": [], "error": self._redactor.text(str(error))}
        steps = state_document.get("steps")
        done, total = position(state)
        actions = state.plan.actions if state.plan else []
        items = [self._plan_item(action, state.action_step, label is not None) for action in actions]
        goal = state.plan.goal.main_objective if state.plan is not None else "(planning)"
        return {
            "goal": shorten(" ".join(goal.split()), 300, self._redactor),
            "phase": label or state.phase,
            "done": done,
            "total": total,
            "revisions": state.revision_count,
            "steps": steps if isinstance(steps, int) else 0,
            "items": items,
        }

    def _plan_item(self, action: Any, action_step: int, ended: bool) -> dict[str, Any]:
        status = str(action.status)
        note = ""
        if status == "running":
            status, note = ("open", "") if ended else ("running", f"step {max(action_step, 1)}/{self._max_steps}")
        elif status == "failed":
            note = f"failed: {action.summary}" if action.summary else "failed"
        elif status == "dropped":
            note = f"dropped in revision {action.dropped_in}"
        elif status == "skipped":
            note = "skipped"
        return {
            "id": shorten(str(action.id), 40, self._redactor),
            "text": shorten(" ".join(str(action.description).split()), 300, self._redactor),
            "status": status if status in ("done", "running", "failed", "dropped", "skipped") else "open",
            "note": shorten(note, 300, self._redactor),
        }

    def doing(self, run_uuid: str) -> str | None:
        """What a run is doing now, in a few words: its plan's phase and current action,
        or its last tool call (None: nothing known on this machine yet)."""
        directory = self.directory(run_uuid)
        if directory is None:
            return None
        raw = self._state(directory).get("planning")
        if raw is not None:
            try:
                state = load_planning_state(raw)
            except PlanningStateError:
                state = None
            if state is not None:
                current = next((a for a in (state.plan.actions if state.plan else []) if a.status == "running"), None)
                now = state.phase + (f" · {current.id} {current.description}" if current else "")
                return shorten(now, 120, self._redactor)
        calls = self.tool_calls(directory)
        return f"last tool: {calls[-1]['tool']}" if calls else None

    def of_run(self, run_uuid: str, final_body: str | None, label: str | None) -> dict[str, Any]:
        """`tool_calls`, `comments` and `plan` of one run ([] and None when its directory is
        not on this machine, e.g. a worker elsewhere)."""
        directory = self.directory(run_uuid)
        if directory is None:
            return {"tool_calls": [], "comments": [], "plan": None}
        return {
            "tool_calls": self.tool_calls(directory),
            "comments": self.comments(directory, final_body),
            "plan": self.plan(directory, label),
        }

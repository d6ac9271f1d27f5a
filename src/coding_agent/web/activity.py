"""What a run did, as the task page shows it (SPEC 11.3, 10.5): its tool calls, the
comments it saw and posted, and, for a planned run, the plan's checklist.

Everything is read from the run's context directory (`context_storage.base_dir`), which
the runner already writes: `tools.jsonl`, `messages.jsonl` and `task_state.json`. No
forge request is made per page view, so the dashboard works without forge tokens.

- tool calls: `tools.jsonl` (name, arguments, error or not, a short result, time);
- comments seen: the conversation in the run's first user turn and the new-comment
  messages (`new_comments.j2`'s wording) in `messages.jsonl`; comments posted: the step
  notes of the progress comment (the saved state's `progress`, `task_state.json` or its journal's last line) and the final comment
  the state store keeps to publish (`run_marks.final_body`);
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
import re
from collections import OrderedDict
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from coding_agent.agent.planning import PlanningStateError, load_planning_state
from coding_agent.agent.planning.checklist import position
from coding_agent.agent.steering.state import JOURNAL_FILE, STATE_FILE, load_state_document
from coding_agent.redaction import Redactor

__all__ = ["RunActivity", "shorten"]

STATES = ("running", "paused", "completed")
MAX_TOOL_CALLS = 200
MAX_COMMENTS = 100
ARGS_CHARS = 200
RESULT_CHARS = 300
COMMENT_CHARS = 2000

_HEADING = re.compile(r"^### (?:user @(?P<user>\S+)|assistant \(you, @(?P<bot>\S+)\)) at (?P<at>\S+).*$", re.M)
_SECTION_END = re.compile(r"^(?:## |Work this |A new comment above asks)", re.M)
_WRAPPER = re.compile(r'</?untrusted-content-[0-9a-f]+(?: author="[^"]*")?>\n?')
_ONE_NEW = re.compile(r"\A\[New Comment from @(?P<author>[^\]\s]+)\]:\n")
_MANY_NEW = "[New Comments Detected]:\n"
_NEW_ITEM = re.compile(r"^Comment \d+ from @(?P<author>\S+) \((?P<at>[^)]*)\):$", re.M)


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


def _conversation(first_turn: str) -> list[dict[str, Any]]:
    """The comments of the first user turn's "## Conversation" section."""
    start = first_turn.find("\n## Conversation")
    if start < 0:
        return []
    section = first_turn[start:]
    headings = list(_HEADING.finditer(section))
    found = []
    for index, heading in enumerate(headings):
        end = headings[index + 1].start() if index + 1 < len(headings) else len(section)
        body = section[heading.end() : end]
        if index + 1 == len(headings):
            closing = _SECTION_END.search(body)
            body = body[: closing.start()] if closing else body
        posted = heading["bot"] is not None
        found.append({"author": heading["bot"] or heading["user"], "at": heading["at"], "body": body, "posted": posted})
    return found


def _new_comments(text: str) -> list[dict[str, Any]]:
    """The comments of one new-comment message (SPEC 8.1's wording), [] for any other text."""
    one = _ONE_NEW.match(text)
    if one:
        return [{"author": one["author"], "at": None, "body": text[one.end() :], "posted": False}]
    if not text.startswith(_MANY_NEW):
        return []
    items = list(_NEW_ITEM.finditer(text))
    return [
        {
            "author": item["author"],
            "at": item["at"],
            "body": text[item.end() : items[i + 1].start() if i + 1 < len(items) else len(text)],
            "posted": False,
        }
        for i, item in enumerate(items)
    ]


def comments_seen(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Comments the run read: the first turn's conversation, then those that arrived."""
    found: list[dict[str, Any]] = []
    first = True
    for message in messages:
        if message.get("role") != "user":
            continue
        content = str(message.get("content") or "")
        if first:
            found.extend(_conversation(content))
            first = False
        else:
            found.extend(_new_comments(content))
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
        seen = self._cached(directory / "messages.jsonl", "comments", lambda p: comments_seen(_jsonl(p)) if p else [])
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
                "body": shorten(_WRAPPER.sub("", str(comment["body"])).strip(), COMMENT_CHARS, self._redactor),
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

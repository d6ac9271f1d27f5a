"""Context storage: one directory per run, holding everything needed to audit or replay it.

`contexts/running/<uuid>/` while the run works, then `completed/` (or `paused/`):
`metadata.json`, `messages.jsonl` (the full history, append-only), `current.jsonl`
(what is sent to the model now), `summaries.jsonl` (compressions), `tools.jsonl`
(every tool call), `comments.jsonl` (every comment the run read, as it read it: the
first turn's conversation, then each new comment sent to the model; the dashboard's
"comments seen" is this file, never the prompts' wording). Everything written
passes through the redactor: a secret in a tool's output never lands on disk.

These two files are the run's only copy of its conversation: the crash checkpoint
(agent/steering/state.py) records how many lines of current.jsonl its history is, and
is told (`on_rewrite`) before a compression replaces that file.
"""

from __future__ import annotations

import json
import os
import shutil
import time
import weakref
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from coding_agent.domain.tasks import Comment
from coding_agent.redaction import Redactor

__all__ = ["ContextStorage", "RunContextFiles", "CommentRead", "COMMENTS_FILE", "CURRENT_FILE", "MESSAGES_FILE"]

RUNNING, COMPLETED, PAUSED = "running", "completed", "paused"
RESULT_PREVIEW_CHARS = 500
MESSAGES_FILE = "messages.jsonl"  # the full history, append-only
CURRENT_FILE = "current.jsonl"  # what is sent to the model now
COMMENTS_FILE = "comments.jsonl"  # the comments the run read, one record each


@dataclass(frozen=True)
class CommentRead:
    """A comment as a run read it, recorded for the task page (SPEC 11.3) so that the page
    never has to find it again in the prompt's wording. `body` is the comment's text as
    the forge gave it (not as the prompt wraps it); `own`: the bot's own comment, an
    answer it gave before (shown as posted)."""

    id: str
    author: str
    created_at: str
    body: str
    own: bool = False

    @classmethod
    def of(cls, comment: Comment, own: bool = False) -> CommentRead:
        return cls(str(comment.id), comment.author, comment.created_at.isoformat(), comment.body, own)


def _open_for_append(path: Path) -> int:
    return os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC, 0o666)


def _write_all(fd: int, text: str) -> None:
    """`text` (UTF-8) in one `write`, looped only on a short write: a kill leaves at most
    a torn last line."""
    data = memoryview(text.encode("utf-8"))
    while data:
        data = data[os.write(fd, data) :]


def _close_all(handles: dict[str, int]) -> None:
    for fd in handles.values():
        os.close(fd)
    handles.clear()


class RunContextFiles:
    """The files of one run. Not thread-safe: one run is worked by one task.

    The files appended to at every step (the history, tools.jsonl, the crash checkpoint's
    journal) stay open while the run writes them: a step appends about six times, and
    opening and closing each time cost more than the writes (figures in
    docs/performance.md). They are closed when the directory moves (a run's end or
    pause), before a file is replaced, and when the object is collected."""

    def __init__(self, root: Path, directory: Path, run_uuid: str, redactor: Redactor) -> None:
        self._root = root
        self.directory = directory
        self.run_uuid = run_uuid
        self._redactor = redactor
        self._written_messages = 0
        self._metadata: dict[str, Any] = {}
        self._rewrite_listeners: list[Callable[[], None]] = []
        self._appending: dict[str, int] = {}  # file name -> descriptor open for appending
        weakref.finalize(self, _close_all, self._appending)

    def append(self, name: str, text: str) -> None:
        """Append `text` to the run's file `name`, creating it if needed."""
        fd = self._appending.get(name)
        if fd is None:
            fd = self._appending[name] = _open_for_append(self.directory / name)
        _write_all(fd, text)

    def replace(self, name: str, text: str) -> None:
        """Replace the run's file `name` whole (write, then rename): a reader never finds
        it half written."""
        fd = self._appending.pop(name, None)
        if fd is not None:
            os.close(fd)
        temporary = self.directory / (name + ".tmp")
        temporary.write_text(text, encoding="utf-8")
        os.replace(temporary, self.directory / name)

    def close(self) -> None:
        """Close the files kept open for appending (the next append opens them again)."""
        _close_all(self._appending)

    def _line(self, record: dict[str, Any]) -> str:
        return self._redactor.json(record) + "\n"

    def _jsonl(self, records: list[dict[str, Any]]) -> str:
        return "".join(self._line(record) for record in records)

    def on_rewrite(self, listener: Callable[[], None]) -> None:
        """Call `listener` right before current.jsonl is replaced (a compression), while
        it still holds what was sent before: whoever points into it keeps that."""
        self._rewrite_listeners.append(listener)

    def _append_jsonl(self, name: str, records: list[dict[str, Any]], text: str | None = None) -> None:
        self.append(name, self._jsonl(records) if text is None else text)

    @property
    def metadata(self) -> dict[str, Any]:
        """What metadata.json holds (a copy): e.g. how often a run tried to publish."""
        return dict(self._metadata)

    def write_metadata(self, **fields: Any) -> None:
        """Merge `fields` into metadata.json (rewritten whole; it is small)."""
        self._metadata.update(fields)
        self._metadata["updated_at"] = time.time()
        path = self.directory / "metadata.json"
        path.write_text(self._redactor.json(self._metadata, indent=2))

    def sync_messages(self, messages: list[dict[str, Any]]) -> None:
        """Append the messages not yet written to messages.jsonl and to current.jsonl.

        Between compressions the history only grows at its end, so current.jsonl (what is
        sent now) grows the same way; `record_summary` rewrites it after a compression.
        Appending keeps the cost of a step independent of the run's length.
        """
        new = messages[self._written_messages :]
        if new:
            text = self._jsonl(new)  # redacted and encoded once, for both files
            self._append_jsonl(MESSAGES_FILE, new, text)
            self._append_jsonl(CURRENT_FILE, new, text)
            self._written_messages = len(messages)

    def _write_current(self, messages: list[dict[str, Any]]) -> None:
        self.replace(CURRENT_FILE, self._jsonl(messages))

    def record_summary(self, summary: dict[str, Any], messages: list[dict[str, Any]]) -> None:
        """After a compression: the summary goes to summaries.jsonl, `messages` (what is sent
        now) to current.jsonl; messages.jsonl, already synced, keeps the full history and
        grows from here with whatever follows `messages`."""
        self._append_jsonl("summaries.jsonl", [summary])
        for listener in self._rewrite_listeners:
            listener()
        self._written_messages = len(messages)
        self._write_current(messages)

    def record_tool_call(
        self,
        tool: str,
        args: dict[str, Any],
        is_error: bool,
        output_chars: int,
        cut_chars: int,
        duration: float,
        result: str = "",
    ) -> None:
        """One line of tools.jsonl. `result`: the tool's output; its first
        RESULT_PREVIEW_CHARS are kept (redacted before the cut, so no secret is halved
        past the redactor) for the dashboard's task page."""
        preview = self._redactor.text(result)[:RESULT_PREVIEW_CHARS]
        self._append_jsonl(
            "tools.jsonl",
            [
                {
                    "at": time.time(),
                    "tool": tool,
                    "args": args,
                    "is_error": is_error,
                    "output_chars": output_chars,
                    "cut_chars": cut_chars,
                    "duration_seconds": round(duration, 4),
                    "result": preview,
                }
            ],
        )

    def record_comments(self, comments: Sequence[CommentRead], read_in: Literal["first_turn", "new_comments"]) -> None:
        """One line of comments.jsonl per comment the model is about to read: `read_in`
        says where (the first turn's conversation, or a new-comments message)."""
        if not comments:
            return
        now = time.time()
        self._append_jsonl(
            COMMENTS_FILE,
            [
                {
                    "at": now,
                    "read_in": read_in,
                    "id": comment.id,
                    "author": comment.author,
                    "created_at": comment.created_at,
                    "body": comment.body,
                    "own": comment.own,
                }
                for comment in comments
            ],
        )

    def move_to(self, state: str) -> Path:
        """Move the run's directory to `running`, `completed` or `paused`; return the new path."""
        target = self._root / state / self.run_uuid
        if target == self.directory:
            return target
        self.close()  # a move across file systems copies: what is open would be the old copy
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.move(str(self.directory), str(target))
        self.directory = target
        return target


class ContextStorage:
    """The `contexts/` tree (`context_storage.base_dir`)."""

    def __init__(self, base_dir: str | Path, redactor: Redactor) -> None:
        self.root = Path(base_dir)
        self._redactor = redactor

    def start_run(self, run_uuid: str, **metadata: Any) -> RunContextFiles:
        directory = self.root / RUNNING / run_uuid
        directory.mkdir(parents=True, exist_ok=False)
        for name in (MESSAGES_FILE, CURRENT_FILE, "summaries.jsonl", "tools.jsonl", COMMENTS_FILE):
            (directory / name).touch()
        files = RunContextFiles(self.root, directory, run_uuid, self._redactor)
        files.write_metadata(uuid=run_uuid, status=RUNNING, started_at=time.time(), **metadata)
        return files

    def find_run(self, run_uuid: str) -> Path | None:
        """The directory of an unfinished run (`running/` or `paused/`), if it is here."""
        for state in (RUNNING, PAUSED):
            directory = self.root / state / run_uuid
            if directory.is_dir():
                return directory
        return None

    def ended_status(self, run_uuid: str) -> str | None:
        """The status a run recorded as it ended (`completed/<uuid>/metadata.json`), or None.

        A run moves its files to `completed/` only once its end is out (labels, final
        comment); a worker that died right after, before the state store recorded the end,
        leaves a `running` run whose end this still knows.
        """
        try:
            data = json.loads((self.root / COMPLETED / run_uuid / "metadata.json").read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return None
        status = data.get("status") if isinstance(data, dict) else None
        return status if isinstance(status, str) and status else None

    def reopen(self, run_uuid: str, messages: list[dict[str, Any]] | None = None) -> RunContextFiles | None:
        """An unfinished run's files, moved back to `running/` (a resume or a takeover).

        `messages`: the restored history. It becomes current.jsonl again (a worker that
        died may have written a step beyond it), and syncing appends only what follows.
        """
        directory = self.find_run(run_uuid)
        if directory is None:
            return None
        files = RunContextFiles(self.root, directory, run_uuid, self._redactor)
        try:
            files._metadata = json.loads((directory / "metadata.json").read_text(encoding="utf-8"))
        except (OSError, ValueError):
            pass
        files.move_to(RUNNING)
        if messages is not None:
            files._write_current(messages)
            files._written_messages = len(messages)
        return files

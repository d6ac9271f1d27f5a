"""A run's saved state, `task_state.json`: what a pause keeps and a takeover continues from,
how a run writes it (`RunSaver`), and how a run is carried on from it (`Continuation`,
SPEC 8.3: resumed after a pause, or taken over after its worker died).

A continued run starts from its saved state: the history goes back into the model
client, the reply it had received but not acted on is acted on without asking again, and
an outcome a dead worker had already recorded is published instead of working again.

Two forms, one reader:

- a pause writes the complete state in one file, LLM history included (SPEC 8.3), so the
  directory in `contexts/paused/<uuid>/` says everything about where the run stands;
- the crash checkpoint written at the start of every loop iteration only appends: the
  history is the run's own `current.jsonl` (SPEC 9.3; synced first), and the small rest
  (steps, usage, steering, progress, planning, how many lines of `current.jsonl` the
  history is) is one line of `task_state_journal.jsonl`; `task_state.json` holds the
  writer's first checkpoint and says to read the journal's last whole line. Rewriting
  the whole history at every step would cost O(history), and replacing a file (write,
  then rename) makes ext4 flush it, which costs a disk write at every step; an append
  costs neither.

Torn writes: `task_state.json` is only ever replaced atomically (write, then rename), by
a writer's first checkpoint, before a compression replaces `current.jsonl` (then it
takes the complete form, the history the journal pointed to copied in, so that nothing
points into a file that no longer holds it), and by the pause; a worker killed while
appending leaves at most half a last line, which the reader skips (the checkpoint before
it counts, and its history is a prefix of `current.jsonl`). Everything passes through
the redactor.

A run saved before the history lived in `current.jsonl` has its own history file
(`task_state_messages.jsonl`): its records name no `history` file, and the reader reads
that one instead.

No path of the machine that wrote it is saved: the workspace is `branch` at `commit`
(the WIP commit a pause pushed, `workspace/wip.py`), so any worker can resume the run.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable
from dataclasses import dataclass, field, fields
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Literal

from coding_agent.agent.loop import LoopOutcome
from coding_agent.agent.steering.interrupts import RunStopped
from coding_agent.context.storage import CURRENT_FILE, ContextStorage, RunContextFiles
from coding_agent.domain.runs import PausedWork, RunMarks, RunRecord
from coding_agent.domain.tasks import Task
from coding_agent.llm.base import LLMClient
from coding_agent.llm.types import LLMReply, Message, TokenUsage, ToolCallRequest
from coding_agent.redaction import Redactor
from coding_agent.tools.host_git import git_dir_for

__all__ = [
    "RunState",
    "StateWriter",
    "RunSaver",
    "Standing",
    "Continuation",
    "pending_reply",
    "load_state",
    "load_state_document",
    "workspace_branch",
    "STATE_FILE",
    "JOURNAL_FILE",
]

log = logging.getLogger(__name__)

STATE_FILE = "task_state.json"
LEGACY_HISTORY_FILE = "task_state_messages.jsonl"  # read (never written) for runs saved before
JOURNAL_FILE = "task_state_journal.jsonl"
_VERSION = 1
# The journal is started afresh (one record) once it grows past this: a long run's
# directory stays small, and the reader never reads much to find the last line.
_JOURNAL_LIMIT_BYTES = 1 << 20


@dataclass
class RunState:
    """Everything needed to continue a run from the step after the last one done."""

    run_uuid: str
    task_key: str
    requester: str | None
    branch: str | None
    steps: int
    messages: list[Message]
    prompt_tokens: int = 0
    completion_tokens: int = 0
    steering: dict[str, Any] = field(default_factory=dict)
    progress: dict[str, Any] = field(default_factory=dict)
    paused: dict[str, Any] | None = None
    saved_at: str = ""
    planning: dict[str, Any] | None = None  # planning mode's state (SPEC 10.4)
    commit: str | None = None  # the paused work's commit on `branch` (SPEC 8.3)


def workspace_branch(workspace: Path) -> str | None:
    """The checked-out branch of a git workspace (read from its git directory's HEAD), else None."""
    try:
        head = (git_dir_for(workspace) / "HEAD").read_text(encoding="utf-8").strip()
    except OSError:
        return None
    return head.removeprefix("ref: refs/heads/") if head.startswith("ref: ") else None


class StateWriter:
    """Writes one run's checkpoints into its context directory (wherever it has moved)."""

    def __init__(self, redactor: Redactor, files: RunContextFiles) -> None:
        """`files`: the run's context files, whose `current.jsonl` holds the history."""
        self._redactor = redactor
        self._files = files
        self._directory: Path | None = None  # None: the next checkpoint starts afresh
        self._last = ""  # the last checkpoint's record (encoded: later changes do not reach it)
        self._journal_bytes = 0
        files.on_rewrite(self._keep_history)

    def _document(self, state: RunState, inline: bool) -> dict[str, Any]:
        # Shallow on purpose: `asdict` would deep-copy the whole history at every step.
        data = {item.name: getattr(state, item.name) for item in fields(state)}
        data["version"] = _VERSION
        data["saved_at"] = datetime.now(UTC).isoformat()
        data["message_count"] = len(state.messages)
        if not inline:
            data["messages"] = None
            data["history"] = CURRENT_FILE
        return data

    def _encode(self, value: Any, indent: int | None = None) -> str:
        return self._redactor.json(value, indent=indent)

    def checkpoint(self, state: RunState) -> None:
        """The per-iteration checkpoint: the history synced to `current.jsonl`, a state
        record appended to the journal.

        The journal is started afresh by this writer's first checkpoint (a resumed or
        taken-over run must not append to what the previous worker wrote), after the
        complete form was written, when the run's directory moved, or when the journal
        is long."""
        directory = self._files.directory
        self._files.sync_messages(state.messages)
        document = self._document(state, inline=False)
        record = self._encode(document) + "\n"
        if directory != self._directory or self._journal_bytes > _JOURNAL_LIMIT_BYTES:
            self._files.replace(JOURNAL_FILE, record)
            # This checkpoint itself, plus where the later ones are: a reader that does not
            # know the journal still finds a consistent (older) state.
            self._files.replace(STATE_FILE, self._encode({**document, "journal": JOURNAL_FILE}))
            self._directory, self._journal_bytes = directory, 0
        else:
            self._files.append(JOURNAL_FILE, record)
        self._journal_bytes += len(record)
        self._last = record

    def _keep_history(self) -> None:
        """`current.jsonl` is about to be replaced: the last checkpoint becomes the complete
        form, with the history it pointed to copied in."""
        if self._directory is None or not self._last:
            return
        directory, self._directory = self._files.directory, None
        try:
            document = json.loads(self._last)
            document["messages"] = _history(directory, document)
            document.pop("history", None)
            self._files.replace(STATE_FILE, self._encode(document, indent=1))
        except (OSError, ValueError) as error:
            # The run goes on; only a crash before its next checkpoint restarts it cleanly.
            log.warning("the checkpoint before the compression could not be kept (%s)", error)

    def save_complete(self, state: RunState) -> None:
        """The pause form: one self-contained file, history included."""
        document = self._document(state, inline=True)
        self._files.replace(STATE_FILE, self._encode(document, indent=1))
        self._directory = None  # a checkpoint after this one must not trust the journal


def _history(directory: Path, document: dict[str, Any]) -> list[Message]:
    """The history a checkpoint points to: the first `message_count` lines of its history
    file (`current.jsonl`; a run saved before that names none and has its own)."""
    name = str(document.get("history") or LEGACY_HISTORY_FILE)
    if name not in (CURRENT_FILE, LEGACY_HISTORY_FILE):
        raise ValueError(f"unknown history file {name!r}")
    count = int(document["message_count"])
    messages: list[Message] = []
    with (directory / name).open(encoding="utf-8") as handle:
        for line in handle:
            if len(messages) == count:
                break
            messages.append(json.loads(line))
    if len(messages) != count:
        raise ValueError(f"{name} holds {len(messages)} of {count} messages")
    return messages


def _last_record(journal: Path) -> dict[str, Any]:
    """The journal's last whole record (a half-written last line is skipped)."""
    for line in reversed(journal.read_text(encoding="utf-8").splitlines()):
        try:
            record = json.loads(line)
        except ValueError:
            continue
        if isinstance(record, dict):
            return record
    raise ValueError(f"{journal.name} holds no whole record")


def _read_document(directory: Path) -> dict[str, Any]:
    """The newest saved document: `task_state.json`, or the journal's last whole record
    when `task_state.json` points to a journal. Raises when it cannot be read."""
    data = json.loads((directory / STATE_FILE).read_text(encoding="utf-8"))
    if isinstance(data, dict) and data.get("journal"):
        data = _last_record(directory / str(data["journal"]))
    if not isinstance(data, dict):
        raise ValueError(f"{STATE_FILE} does not hold an object")
    return data


def load_state_document(directory: Path) -> dict[str, Any] | None:
    """The newest saved state without its history (steps, progress, planning, ...), or
    None: for readers that only show where a run stands (the dashboard's task page), which
    must not parse the whole history at every refresh."""
    try:
        return _read_document(directory)
    except (OSError, ValueError):
        return None


def load_state(directory: Path) -> RunState | None:
    """The state saved in `directory`, or None when there is none or it cannot be read."""
    path = directory / STATE_FILE
    if not path.exists():
        return None
    try:
        data = _read_document(directory)
        messages = data["messages"]
        if messages is None:
            messages = _history(directory, data)
        if not isinstance(messages, list) or not all(isinstance(m, dict) for m in messages):
            raise ValueError("messages must be a list of objects")
        return RunState(
            run_uuid=str(data["run_uuid"]),
            task_key=str(data["task_key"]),
            requester=data.get("requester"),
            branch=data.get("branch"),
            steps=int(data["steps"]),
            messages=messages,
            prompt_tokens=int(data.get("prompt_tokens") or 0),
            completion_tokens=int(data.get("completion_tokens") or 0),
            steering=dict(data.get("steering") or {}),
            progress=dict(data.get("progress") or {}),
            paused=data.get("paused"),
            saved_at=str(data.get("saved_at") or ""),
            planning=data.get("planning"),
            commit=data.get("commit"),
        )
    except (OSError, ValueError, KeyError, TypeError) as error:
        log.warning("%s is unreadable (%s): the run restarts cleanly", path, error)
        return None


@dataclass(frozen=True)
class Standing:
    """Where the run's parts stand, as a checkpoint saves it: its steps, steering's own
    state (comment detection, stop check, loop guard), the progress comment's and
    planning mode's."""

    steps: int
    steering: dict[str, Any]
    progress: dict[str, Any]
    planning: dict[str, Any] | None


class RunSaver:
    """Turns the run as it stands (history, usage, `Standing`) into a `RunState` and
    writes it: the crash checkpoint of every iteration, and the pause's full save. What
    a takeover or a resume continues from is exactly what this writes."""

    def __init__(
        self,
        files: RunContextFiles,
        redactor: Redactor,
        workspace: Path,
        task: Task,
        requester: str | None,
        saved: RunState | None,
        standing: Callable[[], Standing],
    ) -> None:
        """`saved`: the state the run continues from (None: a new run); `standing`: the
        run's parts as they are now, asked at every save."""
        self._files = files
        self._workspace = workspace
        self._task = task
        self._requester = requester
        self._standing = standing
        # The saved history is the run's current.jsonl: no copy of its own.
        self._writer = StateWriter(redactor, files)
        # The paused work the run stands on: a takeover after a crash restores from it too.
        self._work = PausedWork(saved.branch, saved.commit) if saved is not None and saved.branch and saved.commit else None
        # The clone's branch, once read: only the host's git moves HEAD (checkout before the
        # loop, delivery after it; the sandbox has no git dir), so one read serves every
        # crash checkpoint instead of a file read a step.
        self._branch: str | None = None

    def checkpoint(self, llm: LLMClient) -> None:
        """The crash checkpoint, at the start of an iteration (history appended, not rewritten)."""
        self._writer.checkpoint(self.snapshot(llm))

    def save_paused(self, llm: LLMClient, paused: dict[str, Any], work: PausedWork | None) -> None:
        """The pause's save: one self-contained file, history included (SPEC 8.3); `work`:
        the WIP commit the pause pushed (None: no clone, or it could not be committed)."""
        if work is not None:
            self._work = work
        self._writer.save_complete(self.snapshot(llm, paused))

    def _clone_branch(self) -> str | None:
        if self._branch is None:
            self._branch = workspace_branch(self._workspace)
        return self._branch

    def snapshot(self, llm: LLMClient, paused: dict[str, Any] | None = None) -> RunState:
        standing = self._standing()
        work = self._work
        return RunState(
            run_uuid=self._files.run_uuid,
            task_key=str(self._task.key),
            requester=self._requester,
            branch=work.branch if work is not None else self._clone_branch() or self._task.head_branch,
            commit=work.commit if work is not None else None,
            steps=standing.steps,
            messages=llm.messages,
            prompt_tokens=llm.usage.prompt_tokens,
            completion_tokens=llm.usage.completion_tokens,
            steering=standing.steering,
            progress=standing.progress,
            paused=paused,
            planning=standing.planning,
        )


@dataclass(frozen=True)
class Continuation:
    """An existing run to carry on: resumed after a pause, or taken over after a crash.

    `state` is None when nothing is left to do but publish an outcome the run had
    already recorded (`marks.final_status`).
    """

    run: RunRecord
    state: RunState | None
    marks: RunMarks
    workspace: Path

    def reopen(self, storage: ContextStorage) -> tuple[RunContextFiles, Path] | None:
        """The run's context files, back in `running/`, and its workspace; None if gone."""
        files = storage.reopen(self.run.uuid, self.state.messages if self.state is not None else None)
        return (files, self.workspace) if files is not None else None

    def paused_work(self) -> PausedWork | None:
        """The commit on the task's branch the run's files are at (a pause's WIP commit)."""
        state = self.state
        if state is None or not state.branch or not state.commit:
            return None
        return PausedWork(state.branch, state.commit)

    def restore(self, llm: LLMClient) -> bool:
        """Load the saved history into `llm`; False when there is none to load."""
        if self.state is None:
            return False
        llm.messages[:] = [dict(message) for message in self.state.messages]
        llm.usage = TokenUsage(self.state.prompt_tokens, self.state.completion_tokens)
        return True

    def recorded_outcome(self, steps: int) -> LoopOutcome | None:
        """The outcome a previous worker of this run recorded before dying, if any.

        A recorded stop is re-raised, so the runner finishes it as a stop.
        """
        if self.marks.final_status is None:
            return None
        if self.marks.final_status == "stopped":
            raise RunStopped("operator")
        status: Literal["done", "failed"] = "done" if self.marks.final_status == "done" else "failed"
        return LoopOutcome(status, self.marks.final_body or "", steps)


def pending_reply(messages: list[dict[str, Any]]) -> LLMReply | None:
    """The last reply, when the history ends with it: received, but not acted on yet."""
    if not messages or messages[-1].get("role") != "assistant":
        return None
    last = messages[-1]
    calls = []
    for call in last.get("tool_calls") or []:
        function = call.get("function") or {}
        arguments = function.get("arguments")
        calls.append(
            ToolCallRequest(
                id=str(call.get("id", "")),
                name=str(function.get("name", "")),
                arguments=arguments if isinstance(arguments, dict) else {},
            )
        )
    return LLMReply(content=str(last.get("content") or ""), tool_calls=tuple(calls))

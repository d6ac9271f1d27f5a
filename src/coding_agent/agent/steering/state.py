"""A run's saved state, `task_state.json`: what a pause keeps and a takeover continues from.

Two forms, one reader:

- a pause writes the complete state in one file, LLM history included (SPEC 8.3), so the
  directory in `contexts/paused/<uuid>/` says everything about where the run stands;
- the crash checkpoint written at the start of every loop iteration keeps the history in
  `task_state_messages.jsonl`, appended message by message, and only the small rest in
  `task_state.json`. Rewriting the whole history at every step would cost O(history)
  per step; appending costs O(step).

`task_state.json` is replaced atomically (write, then rename), so a worker killed while
writing leaves the previous checkpoint intact. Everything passes through the redactor.

No path of the machine that wrote it is saved: the workspace is `branch` at `commit`
(the WIP commit a pause pushed, `workspace/wip.py`), so any worker can resume the run.
"""

from __future__ import annotations

import json
import logging
import os
from dataclasses import dataclass, field, fields
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from coding_agent.llm.types import Message
from coding_agent.redaction import Redactor
from coding_agent.tools.host_git import git_dir_for

__all__ = ["RunState", "StateWriter", "load_state", "workspace_branch", "STATE_FILE", "HISTORY_FILE"]

log = logging.getLogger(__name__)

STATE_FILE = "task_state.json"
HISTORY_FILE = "task_state_messages.jsonl"
_VERSION = 1


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


def _write_atomically(path: Path, text: str) -> None:
    temporary = path.with_name(path.name + ".tmp")
    temporary.write_text(text, encoding="utf-8")
    os.replace(temporary, path)


class StateWriter:
    """Writes one run's checkpoints into its context directory (wherever it has moved)."""

    def __init__(self, redactor: Redactor) -> None:
        self._redactor = redactor
        self._written = 0
        self._last: Message | None = None

    def _document(self, state: RunState, inline: bool) -> dict[str, Any]:
        # Shallow on purpose: `asdict` would deep-copy the whole history at every step.
        data = {item.name: getattr(state, item.name) for item in fields(state)}
        data["version"] = _VERSION
        data["saved_at"] = datetime.now(timezone.utc).isoformat()
        data["message_count"] = len(state.messages)
        if not inline:
            data["messages"] = None
        return data

    def checkpoint(self, directory: Path, state: RunState) -> None:
        """The per-iteration checkpoint: append new history, then replace the state file."""
        messages = state.messages
        history = directory / HISTORY_FILE
        rewritten = self._written > len(messages) or (self._written and messages[self._written - 1] is not self._last)
        if rewritten or not history.exists():
            self._written = 0
            history.write_text("", encoding="utf-8")
        if len(messages) > self._written:
            with history.open("a", encoding="utf-8") as handle:
                for message in messages[self._written :]:
                    handle.write(json.dumps(self._redactor.data(message), ensure_ascii=False, default=str) + "\n")
                handle.flush()
            self._written = len(messages)
            self._last = messages[-1]
        document = self._document(state, inline=False)
        _write_atomically(directory / STATE_FILE, json.dumps(self._redactor.data(document), ensure_ascii=False, default=str))

    def save_complete(self, directory: Path, state: RunState) -> None:
        """The pause form: one self-contained file, history included."""
        document = self._document(state, inline=True)
        text = json.dumps(self._redactor.data(document), ensure_ascii=False, indent=1, default=str)
        _write_atomically(directory / STATE_FILE, text)


def _history(directory: Path, count: int) -> list[Message]:
    messages: list[Message] = []
    with (directory / HISTORY_FILE).open(encoding="utf-8") as handle:
        for line in handle:
            if len(messages) == count:
                break
            messages.append(json.loads(line))
    if len(messages) != count:
        raise ValueError(f"{HISTORY_FILE} holds {len(messages)} of {count} messages")
    return messages


def load_state(directory: Path) -> RunState | None:
    """The state saved in `directory`, or None when there is none or it cannot be read."""
    path = directory / STATE_FILE
    if not path.exists():
        return None
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
        messages = data["messages"]
        if messages is None:
            messages = _history(directory, int(data["message_count"]))
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

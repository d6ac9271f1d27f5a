"""The progress comment (SPEC 8.4): one comment per run, edited in place.

It shows the status, the steps so far (the model's comment of each step, which is folded
in here instead of being posted as a comment of its own) and the last actions. Edits are
throttled to one per `min_edit_interval_seconds`: an update that comes sooner is written
by a timer when the interval has passed, and `finish` always writes the final state.

A progress comment that cannot be written is logged and never fails the run. The
model's words in it (step comments, tool names and arguments) are redacted, then made
inert markdown (`markdown.py`): no HTML, image, link or mention of theirs works there.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime
from typing import Any

from coding_agent.agent.loop import ToolRunner
from coding_agent.agent.markdown import inert_markdown
from coding_agent.domain.tasks import TaskKey
from coding_agent.prompts.notices import Language, notice
from coding_agent.redaction import Redactor
from coding_agent.sources.base import Source
from coding_agent.tools.types import ToolResult

__all__ = ["ProgressComment", "ProgressTools"]

log = logging.getLogger(__name__)

Sleep = Callable[[float], Awaitable[None]]

_SHOWN_STEPS = 20
_SHOWN_ACTIONS = 5
_NOTE_CHARS = 300
_ARG_CHARS = 60


def _short(text: str, limit: int) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _describe_args(args: dict[str, Any]) -> str:
    parts = []
    for name, value in list(args.items())[:3]:
        shown = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False, default=str)
        parts.append(f"{name}={_short(shown, _ARG_CHARS)}")
    return ", ".join(parts)


class ProgressComment:
    """The run's progress comment: its content, and when and how it is written."""

    def __init__(
        self,
        source: Source,
        key: TaskKey,
        redactor: Redactor,
        language: Language,
        run_uuid: str,
        min_edit_interval_seconds: float,
        on_created: Callable[[str], Awaitable[Any] | None] = lambda comment_id: None,
        clock: Callable[[], float] = time.monotonic,
        sleep: Sleep = asyncio.sleep,
    ) -> None:
        self._source = source
        self._key = key
        self._redactor = redactor
        self._language = language
        self._run_uuid = run_uuid
        self._interval = min_edit_interval_seconds
        self._on_created = on_created
        self._clock = clock
        self._sleep = sleep
        self._lock = asyncio.Lock()
        self._timer: asyncio.Task[None] | None = None
        self._last_edit: float | None = None
        self.comment_id: str | None = None
        self.status = "running"
        self.steps = 0
        self.notes: list[tuple[int, str]] = []
        self.earlier_notes = 0
        self.actions: list[str] = []
        self.edits = 0
        # Planning mode (SPEC 10.5): its headline and the plan as a checklist, set by its driver.
        self.plan_headline = ""
        self.plan_lines: list[str] = []

    # -- content -------------------------------------------------------------------

    def note_steps(self, steps: int) -> None:
        self.steps = steps

    def note_step(self, text: str) -> None:
        """The model's comment of the current step."""
        self.notes.append((self.steps, _short(text, _NOTE_CHARS)))
        if len(self.notes) > _SHOWN_STEPS:
            self.earlier_notes += len(self.notes) - _SHOWN_STEPS
            del self.notes[: len(self.notes) - _SHOWN_STEPS]

    def shown(self, text: str) -> str:
        """The model's `text` as this comment shows it: redacted, then inert markdown."""
        return inert_markdown(self._redactor.text(text))

    def note_action(self, tool: str, args: dict[str, Any], is_error: bool) -> None:
        mark = "✗" if is_error else "✓"
        described = self.shown(_describe_args(args))
        name = tool.replace("`", "'")  # inside the code span: nothing there renders but a backtick
        self.actions.append(f"{mark} `{name}`" + (f" ({described})" if described else ""))
        del self.actions[:-_SHOWN_ACTIONS]

    def render(self) -> str:
        lang = self._language
        stamp = datetime.now(UTC).replace(microsecond=0).isoformat()
        lines = [
            notice("progress_header", lang),
            "",
            notice("progress_status", lang, state=notice(f"progress_{self.status}", lang), steps=self.steps),
            notice("progress_updated", lang, time=stamp, run=self._run_uuid),
        ]
        if self.plan_lines:
            lines += ["", notice("progress_plan", lang), self.plan_headline, "", *self.plan_lines]
        if self.notes:
            lines += ["", notice("progress_steps", lang)]
            if self.earlier_notes:
                lines.append(notice("progress_earlier", lang, count=self.earlier_notes))
            lines += [f"{number}. {self.shown(text)}" for number, text in self.notes]
        if self.actions:
            lines += ["", notice("progress_actions", lang)]
            lines += [f"- {action}" for action in self.actions]
        return self._redactor.text("\n".join(lines))

    # -- writing -------------------------------------------------------------------

    async def start(self) -> None:
        """Post the comment (a new run), or edit the adopted one back to running (a resume)."""
        self.status = "running"
        if self.comment_id is not None:
            await self._write()
            return
        try:
            comment = await self._source.post_comment(self._key, self.render())
        except Exception as error:
            log.warning("%s: could not post the progress comment: %s", self._key, error)
            return
        self.comment_id = comment.id
        self._last_edit = self._clock()
        created = self._on_created(comment.id)
        if created is not None:  # the store write of the comment's id
            await created

    async def refresh(self) -> None:
        """Write the current state now if the interval allows, else once it has passed."""
        if self.comment_id is None:
            return
        now = self._clock()
        if self._last_edit is None or now - self._last_edit >= self._interval:
            await self._write()
        elif self._timer is None or self._timer.done():
            self._timer = asyncio.create_task(self._write_later(self._last_edit + self._interval - now))

    async def flush(self) -> None:
        """Write now, whatever the throttle says: for changes that must be seen before the
        next step (planning mode's checklist once the plan is accepted, SPEC 10.5)."""
        if self._timer is not None and not self._timer.done():
            self._timer.cancel()
        await self._write()

    async def _write_later(self, delay: float) -> None:
        await self._sleep(delay)
        await self._write()

    async def _write(self) -> None:
        async with self._lock:
            if self.comment_id is None:
                return
            body = self.render()
            try:
                await self._source.edit_comment(self._key, self.comment_id, body)
            except Exception as error:
                log.warning("%s: could not update the progress comment: %s", self._key, error)
                return
            self._last_edit = self._clock()
            self.edits += 1

    async def finish(self, status: str) -> None:
        """Write the final state (always, whatever the throttle says)."""
        self.status = status
        await self.discard()
        await self._write()

    async def discard(self) -> None:
        """Drop a scheduled write (the run is given up: someone else writes from now on)."""
        if self._timer is not None and not self._timer.done():
            self._timer.cancel()
            try:
                await self._timer
            except asyncio.CancelledError:
                pass

    # -- saving --------------------------------------------------------------------

    def get_state(self) -> dict[str, Any]:
        return {
            "comment_id": self.comment_id,
            "steps": self.steps,
            "notes": [list(note) for note in self.notes],
            "earlier_notes": self.earlier_notes,
            "actions": list(self.actions),
        }

    def restore_state(self, state: dict[str, Any]) -> None:
        try:
            self.comment_id = state.get("comment_id") or self.comment_id
            self.steps = int(state.get("steps") or 0)
            self.notes = [(int(number), str(text)) for number, text in state.get("notes") or []]
            self.earlier_notes = int(state.get("earlier_notes") or 0)
            self.actions = [str(action) for action in state.get("actions") or []]
        except (TypeError, ValueError) as error:
            log.warning("%s: saved progress state unusable (%s); the list starts afresh", self._key, error)


class ProgressTools:
    """Calls tools through `inner` (the MCP hub) and notes each call in the progress comment."""

    def __init__(self, inner: ToolRunner, progress: ProgressComment) -> None:
        self._inner = inner
        self._progress = progress

    async def call(self, name: str, args: dict[str, Any]) -> ToolResult:
        result = await self._inner.call(name, args)
        self._progress.note_action(name, args, result.is_error)
        await self._progress.refresh()
        return result

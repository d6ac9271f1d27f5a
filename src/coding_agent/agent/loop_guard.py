"""The loop guard (SPEC 4): weak and local models repeat themselves; this notices it.

Two kinds of repetition are counted, each only while it goes on uninterrupted:

- the same tool call (tool and arguments) giving the same result, call after call;
- the same reply text, for replies without tool calls (a model re-sending one answer).

At `warn_after` repeats the model gets a correction naming what it repeats; at
`fail_after` the run ends failed with a comment saying what it repeated, so a stuck
model never burns a budget silently. A call whose arguments or result differ is new
work, never a repeat.

Apart from those (and even when `enabled` is off): the same call failing
`repeated_failure_after` times in a row, whatever its error says, is reported to the
model so that it changes course (SPEC 4). One note per tool result: a call the counts
above already warn about gets their note only.

The counts of repeats are part of the run's saved state (`get_state`/`restore_state`, kept with
steering's in `task_state.json`): a pause and resume, or a takeover, does not give a
looping model a fresh start.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal

from coding_agent.prompts.notices import Language, notice

__all__ = ["LoopGuard", "GuardVerdict", "describe_call"]

_SHOWN_CHARS = 200


def describe_call(tool: str, args: dict[str, Any]) -> str:
    """`tool {"arg": ...}` as the comment and the correction name it (shortened)."""
    text = f"{tool} {json.dumps(args, ensure_ascii=False, sort_keys=True, default=str)}"
    return text if len(text) <= _SHOWN_CHARS else text[: _SHOWN_CHARS - 1] + "…"


def _describe_text(text: str) -> str:
    text = " ".join(text.split())
    shown = text if len(text) <= _SHOWN_CHARS else text[: _SHOWN_CHARS - 1] + "…"
    return f'the reply "{shown}"'


@dataclass(frozen=True)
class GuardVerdict:
    """`warn`: send `message` to the model; `fail`: end the run with `message` as the reason."""

    action: Literal["warn", "fail"]
    message: str


class _Streak:
    """How many times in a row the same fingerprint was seen."""

    def __init__(self) -> None:
        self.fingerprint = ""
        self.count = 0

    def see(self, fingerprint: str) -> int:
        if fingerprint == self.fingerprint:
            self.count += 1
        else:
            self.fingerprint, self.count = fingerprint, 1
        return self.count

    def reset(self) -> None:
        self.fingerprint, self.count = "", 0

    def get_state(self) -> dict[str, Any]:
        return {"fingerprint": self.fingerprint, "count": self.count}

    def restore_state(self, state: Any) -> None:
        """Restore `get_state()`'s dict; anything unusable leaves the streak empty."""
        fingerprint = state.get("fingerprint") if isinstance(state, dict) else None
        count = state.get("count") if isinstance(state, dict) else None
        if isinstance(fingerprint, str) and isinstance(count, int) and not isinstance(count, bool) and count >= 0:
            self.fingerprint, self.count = fingerprint, count
        else:
            self.reset()


def _digest(*parts: str) -> str:
    hasher = hashlib.sha1()
    for part in parts:
        hasher.update(part.encode("utf-8", "replace"))
        hasher.update(b"\0")
    return hasher.hexdigest()


class LoopGuard:
    """One run's repetition counters. `enabled=False` never says anything."""

    def __init__(
        self,
        enabled: bool = True,
        warn_after: int = 3,
        fail_after: int = 5,
        language: Language = "en",
        repeated_failure_after: int = 3,
    ) -> None:
        self.enabled = enabled
        self.warn_after = warn_after
        self.fail_after = fail_after
        self.repeated_failure_after = repeated_failure_after
        self._language = language
        self._calls = _Streak()
        self._replies = _Streak()
        self._failures = _Streak()  # not saved: a continued run counts failures afresh

    def get_state(self) -> dict[str, Any]:
        """The counts so far (fingerprints are digests: no tool output is kept)."""
        return {"calls": self._calls.get_state(), "replies": self._replies.get_state()}

    def restore_state(self, state: Any) -> None:
        """Continue the counts a paused or taken-over run saved (`get_state()`'s dict)."""
        saved = state if isinstance(state, dict) else {}
        self._calls.restore_state(saved.get("calls"))
        self._replies.restore_state(saved.get("replies"))

    def _verdict(self, count: int, what: Callable[[], str]) -> GuardVerdict | None:
        """`what` names the repetition; called only when there is a verdict to word."""
        if count >= self.fail_after:
            return GuardVerdict("fail", notice("loop_guard_failed", self._language, what=what(), count=count))
        if count >= self.warn_after:
            return GuardVerdict("warn", notice("loop_guard_warning", self._language, what=what(), count=count))
        return None

    def tool_call(self, tool: str, args: dict[str, Any], output: str, is_error: bool) -> GuardVerdict | None:
        """After a tool ran: is this the same call with the same result as the ones before,
        or the same call failing again?"""
        arguments = json.dumps(args, ensure_ascii=False, sort_keys=True, default=str)
        failures = self._failures.see(_digest(tool, arguments)) if is_error else 0
        if not is_error:
            self._failures.reset()
        if self.enabled:
            count = self._calls.see(_digest(tool, arguments, output, str(is_error)))
            verdict = self._verdict(count, lambda: describe_call(tool, args))
            self._replies.reset()
            if verdict is not None:
                return verdict
        if failures >= self.repeated_failure_after:
            return GuardVerdict("warn", notice("repeated_failure", self._language, tool=tool, count=failures))
        return None

    def reply_text(self, text: str) -> GuardVerdict | None:
        """A reply without tool calls: the same text as the replies before it?"""
        if not self.enabled:
            return None
        stripped = text.strip()
        if not stripped:
            self._replies.reset()
            return None
        return self._verdict(self._replies.see(_digest(stripped)), lambda: _describe_text(stripped))

"""The loop guard's counts as saved state: what a pause keeps and a resume continues."""

from __future__ import annotations

import json
from typing import Any

import pytest

from coding_agent.agent.loop_guard import LoopGuard


def _view(guard: LoopGuard) -> str | None:
    verdict = guard.tool_call("workspace/view", {"path": "README.md"}, "# readme", False)
    return verdict.action if verdict is not None else None


def test_a_restored_guard_goes_on_counting() -> None:
    before = LoopGuard()
    assert [_view(before), _view(before)] == [None, None]
    after = LoopGuard()
    after.restore_state(json.loads(json.dumps(before.get_state())))  # as task_state.json keeps it
    assert [_view(after), _view(after), _view(after)] == ["warn", "warn", "fail"]


def test_restored_reply_counts_go_on_too() -> None:
    before = LoopGuard()
    before.reply_text("I will look.")
    before.reply_text("I will look.")
    after = LoopGuard()
    after.restore_state(before.get_state())
    verdict = after.reply_text("I will look.")
    assert verdict is not None and verdict.action == "warn"


@pytest.mark.parametrize(
    "saved", [None, "junk", {"calls": {"fingerprint": 3, "count": 2}}, {"calls": {"fingerprint": "x", "count": -1}}]
)
def test_an_unusable_saved_state_starts_the_counts_afresh(saved: Any) -> None:
    guard = LoopGuard()
    guard.restore_state(saved)
    assert guard.get_state() == {"calls": {"fingerprint": "", "count": 0}, "replies": {"fingerprint": "", "count": 0}}
    assert [_view(guard), _view(guard), _view(guard)] == [None, None, "warn"]

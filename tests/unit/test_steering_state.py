"""The saved run state: task_state.json and its history file, and the pending reply."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from coding_agent.agent.steering.control import pending_reply
from coding_agent.agent.steering.state import HISTORY_FILE, STATE_FILE, RunState, StateWriter, load_state
from coding_agent.redaction import Redactor

SECRET = "ghp_" + "StateFileSecret0123456789abcdef"


def _state(messages: list[dict], **changes: object) -> RunState:  # type: ignore[type-arg]
    values: dict[str, object] = dict(
        run_uuid="u-1",
        task_key="github:a/b#1",
        requester="alice",
        commit="0" * 40,
        branch="coding-agent/1-x",
        steps=len([m for m in messages if m["role"] == "assistant"]),
        messages=messages,
        prompt_tokens=10,
        completion_tokens=5,
        steering={"comments": {"last_comment_ids": ["7"], "last_check_timestamp": None}, "stop": {"armed": True}},
        progress={"comment_id": "99"},
    )
    values.update(changes)
    return RunState(**values)  # type: ignore[arg-type]


def test_checkpoints_append_history_and_load_back(tmp_path: Path) -> None:
    writer = StateWriter(Redactor([SECRET]))
    messages = [{"role": "system", "content": "sys"}, {"role": "user", "content": f"token {SECRET}"}]
    writer.checkpoint(tmp_path, _state(messages))
    messages.append({"role": "assistant", "content": "ok"})
    messages.append({"role": "user", "content": "next"})
    writer.checkpoint(tmp_path, _state(messages))

    assert len((tmp_path / HISTORY_FILE).read_text().splitlines()) == 4, "appended, not rewritten"
    assert json.loads((tmp_path / STATE_FILE).read_text())["messages"] is None
    loaded = load_state(tmp_path)
    assert loaded is not None
    assert [m["content"] for m in loaded.messages] == ["sys", "token ***", "ok", "next"], "redacted on disk"
    assert loaded.steps == 1 and loaded.steering["stop"] == {"armed": True} and loaded.progress["comment_id"] == "99"
    assert SECRET not in (tmp_path / HISTORY_FILE).read_text() + (tmp_path / STATE_FILE).read_text()


def test_a_rewritten_history_is_written_again(tmp_path: Path) -> None:
    writer = StateWriter(Redactor())
    messages = [{"role": "system", "content": "s"}, {"role": "user", "content": "a"}, {"role": "assistant", "content": "b"}]
    writer.checkpoint(tmp_path, _state(messages))
    compressed = [{"role": "system", "content": "s"}, {"role": "user", "content": "summary"}]
    writer.checkpoint(tmp_path, _state(compressed))
    loaded = load_state(tmp_path)
    assert loaded is not None and [m["content"] for m in loaded.messages] == ["s", "summary"]


def test_the_pause_form_holds_the_history_itself(tmp_path: Path) -> None:
    messages = [{"role": "system", "content": "s"}, {"role": "user", "content": "u"}]
    StateWriter(Redactor()).save_complete(tmp_path, _state(messages, paused={"reason": "signal", "hold": False}))
    data = json.loads((tmp_path / STATE_FILE).read_text())
    assert data["messages"] == messages and data["paused"]["reason"] == "signal"
    assert not (tmp_path / HISTORY_FILE).exists()
    assert load_state(tmp_path) is not None


@pytest.mark.parametrize("damage", ["missing", "not json", "short history"])
def test_unreadable_state_means_a_clean_restart(tmp_path: Path, damage: str) -> None:
    writer = StateWriter(Redactor())
    writer.checkpoint(tmp_path, _state([{"role": "system", "content": "s"}, {"role": "user", "content": "u"}]))
    if damage == "missing":
        (tmp_path / STATE_FILE).unlink()
    elif damage == "not json":
        (tmp_path / STATE_FILE).write_text("{half")
    else:
        (tmp_path / HISTORY_FILE).write_text('{"role": "system", "content": "s"}\n')
    assert load_state(tmp_path) is None


def test_pending_reply_is_the_unanswered_last_reply() -> None:
    call = {"id": "c1", "type": "function", "function": {"name": "workspace/view", "arguments": {"path": "a"}}}
    history = [{"role": "user", "content": "u"}, {"role": "assistant", "content": "looking", "tool_calls": [call]}]
    reply = pending_reply(history)
    assert reply is not None and reply.content == "looking"
    assert [(c.id, c.name, c.arguments) for c in reply.tool_calls] == [("c1", "workspace/view", {"path": "a"})]
    assert pending_reply([*history, {"role": "tool", "tool_call_id": "c1", "content": "x"}]) is None

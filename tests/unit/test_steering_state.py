"""The saved run state: task_state.json and its history file, and the pending reply."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from coding_agent.agent.steering.state import pending_reply
from coding_agent.agent.steering.state import HISTORY_FILE, STATE_FILE, RunState, StateWriter, load_state
from coding_agent.context.storage import ContextStorage, append_text
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


def test_a_new_writer_starts_the_history_afresh(tmp_path: Path) -> None:
    """A resumed or taken-over run gets a new writer over the directory the previous one
    wrote: its history must replace the old file, not be appended to it."""
    messages = [{"role": "system", "content": "s"}, {"role": "user", "content": "u"}]
    StateWriter(Redactor()).checkpoint(tmp_path, _state(messages))
    continued = [*messages, {"role": "assistant", "content": "a"}]
    StateWriter(Redactor()).checkpoint(tmp_path, _state(continued))
    loaded = load_state(tmp_path)
    assert loaded is not None and [m["content"] for m in loaded.messages] == ["s", "u", "a"]


def test_steady_checkpoints_only_append(tmp_path: Path) -> None:
    """After its first checkpoint a writer appends (history and a small state record) and
    never replaces task_state.json: replacing a file costs a flush on ext4 at every step."""
    writer = StateWriter(Redactor([SECRET]))
    messages = [{"role": "system", "content": "s"}, {"role": "user", "content": "u"}]
    writer.checkpoint(tmp_path, _state(messages, steps=0))
    inode = (tmp_path / STATE_FILE).stat().st_ino
    for step in range(1, 4):
        messages.append({"role": "assistant", "content": f"reply {step} {SECRET}"})
        writer.checkpoint(tmp_path, _state(messages, steps=step, prompt_tokens=10 * step))
    assert (tmp_path / STATE_FILE).stat().st_ino == inode, "task_state.json was not replaced"
    loaded = load_state(tmp_path)
    assert loaded is not None and loaded.steps == 3 and loaded.prompt_tokens == 30
    assert [m["content"] for m in loaded.messages][-1] == "reply 3 ***"
    assert SECRET not in "".join(path.read_text() for path in tmp_path.iterdir())


def test_a_torn_last_record_loads_the_checkpoint_before(tmp_path: Path) -> None:
    """A worker killed while appending leaves half a line: the previous checkpoint counts."""
    writer = StateWriter(Redactor())
    messages = [{"role": "system", "content": "s"}, {"role": "user", "content": "u"}]
    writer.checkpoint(tmp_path, _state(messages, steps=0))
    messages.append({"role": "assistant", "content": "a"})
    writer.checkpoint(tmp_path, _state(messages, steps=1))
    journal = [path for path in tmp_path.iterdir() if path.name not in (STATE_FILE, HISTORY_FILE)]
    assert len(journal) == 1
    journal[0].write_text(journal[0].read_text() + '{"steps": 2, "message_co')
    loaded = load_state(tmp_path)
    assert loaded is not None and loaded.steps == 1 and len(loaded.messages) == 3


def test_a_pause_after_checkpoints_is_what_loads(tmp_path: Path) -> None:
    """The pause's complete file wins over the crash checkpoints written before it."""
    writer = StateWriter(Redactor())
    messages = [{"role": "system", "content": "s"}, {"role": "user", "content": "u"}]
    writer.checkpoint(tmp_path, _state(messages, steps=0))
    writer.checkpoint(tmp_path, _state(messages, steps=1))
    writer.save_complete(tmp_path, _state(messages, steps=2, paused={"reason": "signal", "hold": False}))
    loaded = load_state(tmp_path)
    assert loaded is not None and loaded.steps == 2 and loaded.paused == {"reason": "signal", "hold": False}


def test_history_lines_shared_with_the_context_files_hold_every_message(tmp_path: Path) -> None:
    """The crash checkpoint appends the lines messages.jsonl got (made once per message):
    messages the context files never saw (a correction appended after the last sync),
    messages older than the files' cache of recent lines (a writer starting afresh) and
    a fresh dict equal to an old one must all be on disk, redacted, exactly as a writer
    of its own would have put them."""
    files = ContextStorage(tmp_path / "contexts", Redactor([SECRET])).start_run("run-1")
    shared = StateWriter(Redactor([SECRET]), files.message_line)
    alone = tmp_path / "alone"
    alone.mkdir()
    own = StateWriter(Redactor([SECRET]))

    def checkpoint(messages: list[dict], steps: int) -> None:  # type: ignore[type-arg]
        shared.checkpoint(files.directory, _state(messages, steps=steps))
        own.checkpoint(alone, _state(messages, steps=steps))

    messages: list[dict] = [{"role": "system", "content": "s"}, {"role": "user", "content": f"task {SECRET}"}]  # type: ignore[type-arg]
    files.sync_messages(messages)
    checkpoint(messages, 0)
    for step in range(1, 80):  # past the context files' cache of recent lines
        messages.append({"role": "assistant", "content": f"reply {step} {SECRET}"})
        files.sync_messages(messages)
        messages.append({"role": "user", "content": f"correction {step}"})  # not synced before the checkpoint
        checkpoint(messages, step)
    messages.append({"role": "user", "content": "correction 79"})  # equal to an earlier message, new object
    checkpoint(messages, 80)

    loaded = load_state(files.directory)
    assert loaded is not None and loaded.steps == 80
    assert loaded.messages == Redactor([SECRET]).data(messages)
    assert (files.directory / HISTORY_FILE).read_text() == (alone / HISTORY_FILE).read_text()
    assert SECRET not in (files.directory / HISTORY_FILE).read_text()
    # A new writer (a takeover) writes the whole history afresh, most of it not cached.
    StateWriter(Redactor([SECRET]), files.message_line).checkpoint(files.directory, _state(messages, steps=80))
    again = load_state(files.directory)
    assert again is not None and again.messages == loaded.messages


def test_append_text_creates_appends_and_writes_utf8_whole(tmp_path: Path) -> None:
    path = tmp_path / "lines.jsonl"
    append_text(path, '{"a": "ü"}\n')
    big = json.dumps({"b": "日本語" * 300_000}, ensure_ascii=False) + "\n"
    append_text(path, big)
    assert path.read_text(encoding="utf-8") == '{"a": "ü"}\n' + big

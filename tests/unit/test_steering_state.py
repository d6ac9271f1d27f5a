"""The saved run state: task_state.json, its journal pointing into current.jsonl, and the pending reply."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from coding_agent.agent.steering.state import (
    JOURNAL_FILE,
    LEGACY_HISTORY_FILE,
    STATE_FILE,
    RunState,
    StateWriter,
    load_state,
    pending_reply,
)
from coding_agent.context.storage import CURRENT_FILE, ContextStorage, RunContextFiles
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


def _files(tmp_path: Path, *secrets: str) -> RunContextFiles:
    return ContextStorage(tmp_path / "contexts", Redactor(list(secrets))).start_run("u-1")


def _writer(files: RunContextFiles, *secrets: str) -> StateWriter:
    return StateWriter(Redactor(list(secrets)), files)


def test_checkpoints_point_into_current_jsonl_and_load_back(tmp_path: Path) -> None:
    files = _files(tmp_path, SECRET)
    writer = _writer(files, SECRET)
    messages = [{"role": "system", "content": "sys"}, {"role": "user", "content": f"token {SECRET}"}]
    writer.checkpoint(_state(messages))
    messages.append({"role": "assistant", "content": "ok"})
    messages.append({"role": "user", "content": "next"})
    writer.checkpoint(_state(messages))

    directory = files.directory
    assert len((directory / CURRENT_FILE).read_text().splitlines()) == 4, "the checkpoint synced the history"
    assert (directory / "messages.jsonl").read_text() == (directory / CURRENT_FILE).read_text()
    assert json.loads((directory / STATE_FILE).read_text())["messages"] is None
    assert not (directory / LEGACY_HISTORY_FILE).exists(), "no third copy of the conversation"
    loaded = load_state(directory)
    assert loaded is not None
    assert [m["content"] for m in loaded.messages] == ["sys", "token ***", "ok", "next"], "redacted on disk"
    assert loaded.steps == 1 and loaded.steering["stop"] == {"armed": True} and loaded.progress["comment_id"] == "99"
    assert SECRET not in "".join(path.read_text() for path in directory.iterdir())


def test_a_compressed_history_loads_after_its_checkpoint(tmp_path: Path) -> None:
    files = _files(tmp_path)
    writer = _writer(files)
    messages = [{"role": "system", "content": "s"}, {"role": "user", "content": "a"}, {"role": "assistant", "content": "b"}]
    writer.checkpoint(_state(messages))
    compressed = [{"role": "system", "content": "s"}, {"role": "user", "content": "summary"}]
    files.record_summary({"summary": "summary"}, compressed)
    writer.checkpoint(_state(compressed))
    loaded = load_state(files.directory)
    assert loaded is not None and [m["content"] for m in loaded.messages] == ["s", "summary"]


def test_a_compression_after_the_checkpoint_keeps_what_it_pointed_to(tmp_path: Path) -> None:
    """A worker killed after a compression replaced current.jsonl, before the next
    checkpoint: the run continues from the checkpoint, with the history it saw."""
    files = _files(tmp_path)
    writer = _writer(files)
    messages = [{"role": "system", "content": "s"}, {"role": "user", "content": "a"}, {"role": "assistant", "content": "b"}]
    writer.checkpoint(_state(messages, steps=7))
    messages.append({"role": "user", "content": "after the checkpoint"})
    files.sync_messages(messages)
    files.record_summary({"summary": "summary"}, [messages[0], {"role": "user", "content": "summary"}])
    loaded = load_state(files.directory)
    assert loaded is not None and loaded.steps == 7
    assert [m["content"] for m in loaded.messages] == ["s", "a", "b"]


def test_the_pause_form_holds_the_history_itself(tmp_path: Path) -> None:
    files = _files(tmp_path)
    messages = [{"role": "system", "content": "s"}, {"role": "user", "content": "u"}]
    _writer(files).save_complete(_state(messages, paused={"reason": "signal", "hold": False}))
    data = json.loads((files.directory / STATE_FILE).read_text())
    assert data["messages"] == messages and data["paused"]["reason"] == "signal"
    assert not (files.directory / LEGACY_HISTORY_FILE).exists()
    assert load_state(files.directory) is not None


@pytest.mark.parametrize("damage", ["missing", "not json", "short history"])
def test_unreadable_state_means_a_clean_restart(tmp_path: Path, damage: str) -> None:
    files = _files(tmp_path)
    _writer(files).checkpoint(_state([{"role": "system", "content": "s"}, {"role": "user", "content": "u"}]))
    if damage == "missing":
        (files.directory / STATE_FILE).unlink()
    elif damage == "not json":
        (files.directory / STATE_FILE).write_text("{half")
    else:
        (files.directory / CURRENT_FILE).write_text('{"role": "system", "content": "s"}\n')
    assert load_state(files.directory) is None


def test_a_run_saved_with_its_own_history_file_still_loads(tmp_path: Path) -> None:
    """A run paused or cut short before the history lived in current.jsonl: its journal
    records name no history file, and task_state_messages.jsonl holds the history."""
    directory = tmp_path / "old-run"
    directory.mkdir()
    record = {"run_uuid": "u-1", "task_key": "github:a/b#1", "requester": None, "branch": None, "steps": 2}
    messages = [{"role": "system", "content": "s"}, {"role": "user", "content": "u"}, {"role": "assistant", "content": "a"}]
    (directory / LEGACY_HISTORY_FILE).write_text("".join(json.dumps(m) + "\n" for m in messages))
    (directory / JOURNAL_FILE).write_text(json.dumps({**record, "messages": None, "message_count": 3}) + "\n")
    (directory / STATE_FILE).write_text(json.dumps({**record, "messages": None, "message_count": 2, "journal": JOURNAL_FILE}))
    loaded = load_state(directory)
    assert loaded is not None and loaded.messages == messages and loaded.steps == 2


def test_pending_reply_is_the_unanswered_last_reply() -> None:
    call = {"id": "c1", "type": "function", "function": {"name": "workspace/view", "arguments": {"path": "a"}}}
    history = [{"role": "user", "content": "u"}, {"role": "assistant", "content": "looking", "tool_calls": [call]}]
    reply = pending_reply(history)
    assert reply is not None and reply.content == "looking"
    assert [(c.id, c.name, c.arguments) for c in reply.tool_calls] == [("c1", "workspace/view", {"path": "a"})]
    assert pending_reply([*history, {"role": "tool", "tool_call_id": "c1", "content": "x"}]) is None


def test_a_new_writer_continues_from_the_reopened_history(tmp_path: Path) -> None:
    """A resumed or taken-over run reopens the files with the history it restored (a dead
    worker may have written beyond it) and gets a new writer over the same directory."""
    storage = ContextStorage(tmp_path / "contexts", Redactor())
    files = storage.start_run("u-1")
    messages = [{"role": "system", "content": "s"}, {"role": "user", "content": "u"}]
    _writer(files).checkpoint(_state(messages))
    files.sync_messages([*messages, {"role": "assistant", "content": "written, never checkpointed"}])
    restored = load_state(files.directory)
    assert restored is not None and restored.messages == messages
    reopened = storage.reopen("u-1", restored.messages)
    assert reopened is not None
    continued = [*restored.messages, {"role": "assistant", "content": "a"}]
    _writer(reopened).checkpoint(_state(continued))
    loaded = load_state(reopened.directory)
    assert loaded is not None and [m["content"] for m in loaded.messages] == ["s", "u", "a"]


def test_steady_checkpoints_only_append(tmp_path: Path) -> None:
    """After its first checkpoint a writer appends (history and a small state record) and
    never replaces task_state.json: replacing a file costs a flush on ext4 at every step."""
    files = _files(tmp_path, SECRET)
    writer = _writer(files, SECRET)
    messages = [{"role": "system", "content": "s"}, {"role": "user", "content": "u"}]
    writer.checkpoint(_state(messages, steps=0))
    inode = (files.directory / STATE_FILE).stat().st_ino
    for step in range(1, 4):
        messages.append({"role": "assistant", "content": f"reply {step} {SECRET}"})
        writer.checkpoint(_state(messages, steps=step, prompt_tokens=10 * step))
    assert (files.directory / STATE_FILE).stat().st_ino == inode, "task_state.json was not replaced"
    loaded = load_state(files.directory)
    assert loaded is not None and loaded.steps == 3 and loaded.prompt_tokens == 30
    assert [m["content"] for m in loaded.messages][-1] == "reply 3 ***"
    assert SECRET not in "".join(path.read_text() for path in files.directory.iterdir())


def test_a_torn_last_record_loads_the_checkpoint_before(tmp_path: Path) -> None:
    """A worker killed while appending leaves half a line: the previous checkpoint counts."""
    files = _files(tmp_path)
    writer = _writer(files)
    messages = [{"role": "system", "content": "s"}, {"role": "user", "content": "u"}]
    writer.checkpoint(_state(messages, steps=0))
    messages.append({"role": "assistant", "content": "a"})
    writer.checkpoint(_state(messages, steps=1))
    journal = files.directory / JOURNAL_FILE
    journal.write_text(journal.read_text() + '{"steps": 2, "message_co')
    loaded = load_state(files.directory)
    assert loaded is not None and loaded.steps == 1 and len(loaded.messages) == 3


def test_a_pause_after_checkpoints_is_what_loads(tmp_path: Path) -> None:
    """The pause's complete file wins over the crash checkpoints written before it."""
    files = _files(tmp_path)
    writer = _writer(files)
    messages = [{"role": "system", "content": "s"}, {"role": "user", "content": "u"}]
    writer.checkpoint(_state(messages, steps=0))
    writer.checkpoint(_state(messages, steps=1))
    writer.save_complete(_state(messages, steps=2, paused={"reason": "signal", "hold": False}))
    loaded = load_state(files.directory)
    assert loaded is not None and loaded.steps == 2 and loaded.paused == {"reason": "signal", "hold": False}


def test_messages_appended_after_the_last_sync_are_saved_too(tmp_path: Path) -> None:
    """A correction appended after the loop's last sync, and a fresh dict equal to an old
    message, are in the checkpoint's history, redacted, as the model saw them."""
    files = _files(tmp_path, SECRET)
    writer = _writer(files, SECRET)
    messages: list[dict] = [{"role": "system", "content": "s"}, {"role": "user", "content": f"task {SECRET}"}]  # type: ignore[type-arg]
    files.sync_messages(messages)
    writer.checkpoint(_state(messages, steps=0))
    for step in range(1, 80):
        messages.append({"role": "assistant", "content": f"reply {step} {SECRET}"})
        files.sync_messages(messages)
        messages.append({"role": "user", "content": f"correction {step}"})  # not synced before the checkpoint
        writer.checkpoint(_state(messages, steps=step))
    messages.append({"role": "user", "content": "correction 79"})  # equal to an earlier message, new object
    writer.checkpoint(_state(messages, steps=80))

    loaded = load_state(files.directory)
    assert loaded is not None and loaded.steps == 80
    assert loaded.messages == Redactor([SECRET]).data(messages)
    assert SECRET not in (files.directory / CURRENT_FILE).read_text()


def test_an_append_creates_the_file_and_writes_utf8_whole(tmp_path: Path) -> None:
    files = ContextStorage(tmp_path, Redactor()).start_run("run-1")
    files.append("lines.jsonl", '{"a": "ü"}\n')
    big = json.dumps({"b": "日本語" * 300_000}, ensure_ascii=False) + "\n"
    files.append("lines.jsonl", big)
    assert (files.directory / "lines.jsonl").read_text(encoding="utf-8") == '{"a": "ü"}\n' + big
    files.replace("lines.jsonl", "fresh\n")
    files.append("lines.jsonl", "after\n")
    moved = files.move_to("completed")
    files.append("lines.jsonl", "moved\n")
    assert (moved / "lines.jsonl").read_text(encoding="utf-8") == "fresh\nafter\nmoved\n"
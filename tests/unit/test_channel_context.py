"""Seed 004's test table for Context, and the ChannelMessages builder (SPEC 9.2)."""

from __future__ import annotations

import dataclasses
from datetime import datetime, timedelta, timezone

import pytest

from coding_agent.context.channel_context import build_channel_messages
from coding_agent.domain.channel import ChannelMemory, ChannelMessages, Context
from coding_agent.domain.tasks import Comment, Thread

T0 = datetime(2026, 3, 1, 9, 0, tzinfo=timezone.utc)
HISTORY = ChannelMessages("github:acme/widgets", "acme/widgets")
MEMORIES = {
    "github:acme/widgets": ChannelMemory("github:acme/widgets", "acme/widgets", "Tests: make test", "Fixed #3"),
    "github:acme/gadgets": ChannelMemory("github:acme/gadgets", "acme/gadgets", long_term_memory="Go project"),
}
THREADS = {"github:acme/widgets#3": "Fixed the parser.", "github:acme/widgets#4": "Added docs."}


def test_context_with_required_fields_only_has_defaults() -> None:
    context = Context(persona="A careful engineer.", conversation_history=HISTORY)
    assert context.workspace_long_term_memory is None and context.workspace_short_term_memory is None
    assert dict(context.channel_memories) == {} and dict(context.thread_memories) == {}
    assert context.target_thread is None


def test_context_with_every_field() -> None:
    context = Context(
        persona="A careful engineer.",
        conversation_history=HISTORY,
        workspace_long_term_memory="acme builds widgets",
        workspace_short_term_memory="busy week",
        channel_memories=MEMORIES,
        thread_memories=THREADS,
        target_thread="github:acme/widgets#3",
    )
    assert context.persona == "A careful engineer." and context.conversation_history is HISTORY
    assert context.workspace_long_term_memory == "acme builds widgets"
    assert context.workspace_short_term_memory == "busy week"


def test_context_keeps_several_channel_memories() -> None:
    context = Context(None, HISTORY, channel_memories=MEMORIES)
    assert set(context.channel_memories) == {"github:acme/widgets", "github:acme/gadgets"}
    assert context.channel_memories["github:acme/gadgets"].long_term_memory == "Go project"


def test_context_keeps_several_thread_memories() -> None:
    context = Context(None, HISTORY, thread_memories=THREADS)
    assert dict(context.thread_memories) == THREADS


def test_context_keeps_the_target_thread() -> None:
    assert Context(None, HISTORY, target_thread="github:acme/widgets#3").target_thread == "github:acme/widgets#3"


def test_context_is_immutable() -> None:
    context = Context(None, HISTORY, channel_memories=MEMORIES)
    with pytest.raises(dataclasses.FrozenInstanceError):
        context.persona = "changed"  # type: ignore[misc]
    with pytest.raises(TypeError):
        context.channel_memories["x"] = MEMORIES["github:acme/gadgets"]  # type: ignore[index]


def test_context_rejects_a_memory_under_another_channel() -> None:
    with pytest.raises(ValueError, match="holds the memory of"):
        Context(None, HISTORY, channel_memories={"github:acme/other": MEMORIES["github:acme/gadgets"]})


def test_context_rejects_a_history_that_is_not_channel_messages() -> None:
    with pytest.raises(TypeError, match="ChannelMessages"):
        Context(None, [])  # type: ignore[arg-type]


# -- building ChannelMessages from a task's comments and threads -------------------------


def _comment(id: str, minutes: int, thread: str | None = None) -> Comment:
    return Comment(id, "alice", f"c{id}", T0 + timedelta(minutes=minutes), thread_id=thread)


def test_builder_keeps_the_newest_messages_and_restores_cut_thread_parents() -> None:
    top = [_comment("1", 0), _comment("2", 1), _comment("7", 7)]
    old_thread = Thread("T", (_comment("3", 2, "T"), _comment("4", 3, "T"), _comment("8", 8, "T")))
    new_thread = Thread("U", (_comment("5", 5, "U"), _comment("6", 6, "U")))

    channel = build_channel_messages("github:acme/widgets", "acme/widgets", top, [old_thread, new_thread], limit=4)

    assert [m.id for m in channel.get_all_messages()] == ["3", "5", "6", "7", "8"]
    assert [m.id for m in channel.get_thread("T")] == ["8"], "only the newest 4 messages are kept"
    assert [m.id for m in channel.get_thread("U")] == ["5", "6"]
    assert [m.id for m in channel.top_level_messages] == ["3", "5", "7"], "thread parents added at the top level"
    assert channel.total_message_count == 6

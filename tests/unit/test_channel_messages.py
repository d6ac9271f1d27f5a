"""Seed 004's test tables for ChannelMessages and ChannelMemory (SPEC 9.2)."""

from __future__ import annotations

import dataclasses
from datetime import datetime, timedelta, timezone

import pytest

from coding_agent.domain.channel import ChannelMemory, ChannelMessages
from coding_agent.domain.tasks import Comment

T0 = datetime(2026, 3, 1, 9, 0, tzinfo=timezone.utc)


def message(id: str, minutes: int, thread: str | None = None, author: str = "alice") -> Comment:
    return Comment(id, author, f"message {id}", T0 + timedelta(minutes=minutes), thread_id=thread)


TOP = [message("1", 0), message("2", 10), message("5", 40)]
THREAD_A = [message("3", 20, "A"), message("6", 50, "A")]
THREAD_B = [message("4", 30, "B")]


def mixed() -> ChannelMessages:
    return ChannelMessages("github:acme/widgets", "acme/widgets", TOP, {"A": THREAD_A, "B": THREAD_B})


# -- ChannelMessages --------------------------------------------------------------------


def test_empty_instance_has_empty_collections() -> None:
    channel = ChannelMessages("github:acme/widgets", "acme/widgets")
    assert list(channel.top_level_messages) == [] and dict(channel.thread_messages) == {}
    assert channel.thread_count == 0 and channel.total_message_count == 0
    assert channel.get_all_messages() == []


def test_top_level_only() -> None:
    channel = ChannelMessages("c", "n", top_level_messages=TOP)
    assert list(channel.top_level_messages) == TOP
    assert dict(channel.thread_messages) == {}


def test_threads_only() -> None:
    channel = ChannelMessages("c", "n", thread_messages={"A": THREAD_A})
    assert list(channel.top_level_messages) == []
    assert channel.get_thread("A") == THREAD_A


def test_mixed_sets_both() -> None:
    channel = mixed()
    assert list(channel.top_level_messages) == TOP
    assert {key: list(value) for key, value in channel.thread_messages.items()} == {"A": THREAD_A, "B": THREAD_B}


def test_get_all_messages_is_chronological() -> None:
    assert [m.id for m in mixed().get_all_messages()] == ["1", "2", "3", "4", "5", "6"]


def test_get_thread_of_a_known_thread() -> None:
    assert mixed().get_thread("A") == THREAD_A


def test_get_thread_of_an_unknown_thread_is_empty() -> None:
    assert mixed().get_thread("nope") == []


def test_thread_count() -> None:
    assert mixed().thread_count == 2


def test_total_message_count() -> None:
    assert mixed().total_message_count == 6


def test_channel_messages_are_immutable() -> None:
    channel = mixed()
    with pytest.raises(dataclasses.FrozenInstanceError):
        channel.channel_name = "other"  # type: ignore[misc]
    with pytest.raises(TypeError):
        channel.thread_messages["C"] = []  # type: ignore[index]
    with pytest.raises(AttributeError):
        channel.top_level_messages.append(message("9", 90))  # type: ignore[attr-defined]


def test_caller_lists_do_not_leak_into_the_instance() -> None:
    top = list(TOP)
    channel = ChannelMessages("c", "n", top)
    top.append(message("9", 90))
    assert len(channel.top_level_messages) == 3


def test_a_message_filed_under_the_wrong_thread_is_rejected() -> None:
    with pytest.raises(ValueError, match="another thread"):
        ChannelMessages("c", "n", thread_messages={"A": [message("4", 30, "B")]})


def test_a_thread_parent_at_top_level_needs_its_thread() -> None:
    with pytest.raises(ValueError, match="not in thread_messages"):
        ChannelMessages("c", "n", top_level_messages=[message("3", 20, "A")])


def test_blank_channel_id_is_rejected() -> None:
    with pytest.raises(ValueError, match="channel_id"):
        ChannelMessages(" ", "n")


# -- ChannelMemory ----------------------------------------------------------------------


def test_memory_with_required_fields_only() -> None:
    memory = ChannelMemory("github:acme/widgets", "acme/widgets")
    assert memory.long_term_memory is None and memory.short_term_memory is None


def test_memory_with_every_field() -> None:
    memory = ChannelMemory("github:acme/widgets", "acme/widgets", "Run `make test`.", "Fixed the parser.")
    assert (memory.channel_id, memory.channel_name) == ("github:acme/widgets", "acme/widgets")
    assert memory.long_term_memory == "Run `make test`." and memory.short_term_memory == "Fixed the parser."


def test_memory_is_immutable() -> None:
    memory = ChannelMemory("c", "n")
    with pytest.raises(dataclasses.FrozenInstanceError):
        memory.short_term_memory = "changed"  # type: ignore[misc]


def test_memory_rejects_non_text() -> None:
    with pytest.raises(TypeError, match="long_term_memory"):
        ChannelMemory("c", "n", long_term_memory=42)  # type: ignore[arg-type]

"""ToolNameCodec: legal, reversible wire names for `server/tool` names."""

from __future__ import annotations

import re

import pytest

from coding_agent.llm.tool_names import (
    RAW_ARGUMENTS_KEY,
    CallAnswers,
    ToolNameCodec,
    UnknownToolNameError,
    match_offered_name,
    parse_tool_arguments,
)

LEGAL = re.compile(r"^[A-Za-z0-9_-]{1,64}$")


def test_server_tool_becomes_double_underscore_and_back() -> None:
    codec = ToolNameCodec(["workspace/create", "github/get_issue"])
    assert codec.encode("workspace/create") == "workspace__create"
    assert codec.decode("workspace__create") == "workspace/create"
    assert codec.decode("github__get_issue") == "github/get_issue"


def test_invalid_characters_are_replaced_and_round_trip() -> None:
    names = ["my.server/do it", "srv/ütf-8", "a:b/c"]
    codec = ToolNameCodec(names)
    for name in names:
        wire = codec.encode(name)
        assert LEGAL.match(wire), wire
        assert codec.decode(wire) == name
    assert codec.encode("my.server/do it") == "my_server__do_it"


def test_long_names_are_cut_with_a_hash_and_stay_unique() -> None:
    long_a = "server/" + "a" * 100
    long_b = "server/" + "a" * 99 + "b"
    codec = ToolNameCodec([long_a, long_b])
    wire_a, wire_b = codec.encode(long_a), codec.encode(long_b)
    assert LEGAL.match(wire_a) and LEGAL.match(wire_b)
    assert wire_a != wire_b
    assert codec.decode(wire_a) == long_a and codec.decode(wire_b) == long_b


def test_colliding_names_all_get_a_hash_whatever_the_order() -> None:
    first = ToolNameCodec(["a/b", "a__b", "other/tool"])
    second = ToolNameCodec(["a__b", "other/tool", "a/b"])
    assert first.encode("a/b") != first.encode("a__b")
    assert first.encode("a/b") == second.encode("a/b")
    assert first.encode("a__b") == second.encode("a__b")
    assert first.encode("other/tool") == "other__tool"  # untouched by the collision
    assert {first.decode(first.encode(name)) for name in ["a/b", "a__b"]} == {"a/b", "a__b"}


def test_unknown_wire_name_is_a_clear_error() -> None:
    codec = ToolNameCodec(["workspace/create"])
    with pytest.raises(UnknownToolNameError, match="'made_up'.*workspace__create"):
        codec.decode("made_up")
    assert codec.decode_or_keep("made_up") == "made_up"
    assert codec.decode("workspace/create") == "workspace/create"  # a real name given as is


def test_offered_name_is_found_from_the_real_name_alone() -> None:
    long_name = "server/" + "x" * 80
    offered = ToolNameCodec(["workspace/create", long_name, "done"]).wire_names
    assert match_offered_name("workspace/create", offered) == "workspace__create"
    assert match_offered_name(long_name, offered) == ToolNameCodec([long_name]).encode(long_name)
    assert match_offered_name("done", offered) == "done"
    assert match_offered_name("missing/tool", offered) is None


def test_arguments_text_is_parsed_or_kept_raw() -> None:
    assert parse_tool_arguments('{"path": "a"}') == {"path": "a"}
    assert parse_tool_arguments("") == {}
    assert parse_tool_arguments(None) == {}
    assert parse_tool_arguments("{broken") == {RAW_ARGUMENTS_KEY: "{broken"}
    assert parse_tool_arguments("[1, 2]") == {RAW_ARGUMENTS_KEY: "[1, 2]"}


def test_unanswered_tool_calls_get_an_answer_before_the_next_turn() -> None:
    messages = [
        {"role": "user", "content": "go"},
        {
            "role": "assistant",
            "content": "",
            "tool_calls": [
                {"id": "c1", "type": "function", "function": {"name": "w/a", "arguments": {}}},
                {"id": "c2", "type": "function", "function": {"name": "w/b", "arguments": {}}},
            ],
        },
        {"role": "tool", "tool_call_id": "c1", "name": "w/a", "content": "ok"},
        {"role": "user", "content": "fix your reply"},
    ]
    answers = CallAnswers()
    fixed = [sent for message in messages for sent in answers.send(message)]
    assert [m["role"] for m in fixed] == ["user", "assistant", "tool", "tool", "user"]
    assert fixed[3]["tool_call_id"] == "c2" and fixed[3]["content"] == "not run"
    assert len(messages) == 4  # the history itself is not changed

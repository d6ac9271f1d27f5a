"""WireHistory: each request carries the whole history as it is then, in wire form."""

from __future__ import annotations

from typing import Any

from coding_agent.llm.openai_client import OpenAICompatibleClient
from coding_agent.llm.tool_names import CallAnswers, ToolNameCodec
from coding_agent.llm.types import Message
from coding_agent.llm.wire_history import WireHistory

CODEC = ToolNameCodec(["w/view", "w/edit"])


def _whole(history: list[Message], codec: ToolNameCodec = CODEC) -> list[dict[str, Any]]:
    """The wire form converted from scratch: what every request must carry."""
    answers = CallAnswers()
    return [OpenAICompatibleClient._wire_message(sent, codec) for message in history for sent in answers.send(message)]


def _call(call_id: str, name: str, arguments: dict[str, Any]) -> Message:
    return {
        "role": "assistant",
        "content": "",
        "tool_calls": [{"id": call_id, "type": "function", "function": {"name": name, "arguments": arguments}}],
    }


def _history() -> list[Message]:
    return [{"role": "system", "content": "be brief"}, {"role": "user", "content": "read a.txt"}]


def test_a_growing_history_is_sent_whole_at_every_request() -> None:
    wire, history = WireHistory(OpenAICompatibleClient._wire_message), _history()
    assert wire.messages(history, CODEC) == _whole(history)
    history.append(_call("c1", "w/view", {"path": "a.txt", "view_range": [1, 5]}))
    assert wire.messages(history, CODEC) == _whole(history)
    history.append({"role": "tool", "tool_call_id": "c1", "name": "w/view", "content": "one"})
    history.append(_call("c2", "w/edit", {"path": "a.txt"}))
    assert wire.messages(history, CODEC) == _whole(history)
    # An unusable reply answered with a correction: its call is answered "not run" first.
    history.append({"role": "user", "content": "fix your reply"})
    sent = wire.messages(history, CODEC)
    assert sent == _whole(history)
    assert [message["role"] for message in sent[-2:]] == ["tool", "user"]


def test_a_message_changed_after_a_request_goes_as_it_is_now() -> None:
    wire, history = WireHistory(OpenAICompatibleClient._wire_message), _history()
    history.append(_call("c1", "w/view", {"path": "a.txt", "view_range": [1, 5]}))
    history.append({"role": "tool", "tool_call_id": "c1", "name": "w/view", "content": "one"})
    wire.messages(history, CODEC)
    history[2]["tool_calls"][0]["function"]["arguments"]["view_range"][1] = 9
    history[1]["content"] = "read b.txt"
    history.append({"role": "user", "content": "go on"})
    assert wire.messages(history, CODEC) == _whole(history)


def test_a_shorter_history_or_other_tools_are_converted_afresh() -> None:
    wire, history = WireHistory(OpenAICompatibleClient._wire_message), _history()
    history.append(_call("c1", "w/view", {"path": "a.txt"}))
    history.append({"role": "tool", "tool_call_id": "c1", "name": "w/view", "content": "one"})
    wire.messages(history, CODEC)
    compressed = [history[0], {"role": "user", "content": "summary: a.txt read"}]
    assert wire.messages(compressed, CODEC) == _whole(compressed)
    other = ToolNameCodec(["w/view", "w/edit", "x/y"])
    compressed.append(_call("c2", "x/y", {}))
    assert wire.messages(compressed, other) == _whole(compressed, other)

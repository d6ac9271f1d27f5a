"""The history in a provider's wire form, converted once per message.

A provider sends the whole history with every request, each message converted to its
wire form (tool names encoded, arguments as the provider takes them, calls left
unanswered answered: `tool_names.CallAnswers`). Between compressions the history only
grows at its end, so a request's messages are the previous request's and a few more:
only those few are converted. Nothing is keyed by identity: the messages converted are
kept as copies, and at every request the history's start is compared with them by value;
any difference (a compression, a restore, a message changed in place) or another set of
tools converts the whole history again. Figures in docs/performance.md.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from coding_agent.llm.tool_names import CallAnswers, ToolNameCodec
from coding_agent.llm.types import Message

__all__ = ["WireHistory"]

Convert = Callable[[Message, ToolNameCodec], dict[str, Any]]


def _copy(value: Any) -> Any:
    """A copy of a JSON-like value that later changes to the original do not reach."""
    if isinstance(value, dict):
        return {key: _copy(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [_copy(item) for item in value]
    return value


class WireHistory:
    """One conversation's history as last sent, and the wire form of each message."""

    def __init__(self, convert: Convert) -> None:
        self._convert = convert
        self._tools: list[str] | None = None
        self._converted: list[Message] = []  # copies of the messages converted so far
        self._wire: list[dict[str, Any]] = []
        self._answers = CallAnswers()

    def messages(self, history: list[Message], codec: ToolNameCodec) -> list[dict[str, Any]]:
        """`history` in wire form: a new list (its items are shared with later requests',
        so the caller sends them and never changes them)."""
        done = len(self._converted)
        tools = codec.real_names
        if tools != self._tools or len(history) < done or history[:done] != self._converted:
            self._tools, self._converted, self._wire, self._answers = tools, [], [], CallAnswers()
            done = 0
        for message in history[done:]:
            self._wire += [self._convert(sent, codec) for sent in self._answers.send(message)]
            self._converted.append(_copy(message))
        return list(self._wire)

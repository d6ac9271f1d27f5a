"""Values that cross the LLM boundary: tool descriptions, tool calls, replies, usage."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from coding_agent.domain.chat import Message, ToolSpec

__all__ = ["ToolSpec", "ToolCallRequest", "TokenUsage", "LLMReply", "Message"]


@dataclass(frozen=True)
class ToolCallRequest:
    """A tool call the model asked for, with the name already decoded to `server/tool`."""

    id: str
    name: str
    arguments: dict[str, Any]


@dataclass(frozen=True)
class TokenUsage:
    prompt_tokens: int = 0
    completion_tokens: int = 0

    @property
    def total_tokens(self) -> int:
        return self.prompt_tokens + self.completion_tokens

    def __add__(self, other: TokenUsage) -> TokenUsage:
        return TokenUsage(self.prompt_tokens + other.prompt_tokens, self.completion_tokens + other.completion_tokens)


@dataclass(frozen=True)
class LLMReply:
    """One assistant turn: its text, the tool calls it asked for, what it cost.

    `problem` says why the reply cannot be used although it arrived (content that is not
    text, a runaway length: see `llm/hygiene.py`); the protocols answer it with a
    correction message.
    """

    content: str
    tool_calls: tuple[ToolCallRequest, ...] = ()
    usage: TokenUsage = field(default_factory=TokenUsage)
    duration_seconds: float = 0.0
    problem: str = ""

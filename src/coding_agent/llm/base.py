"""The conversation with the model: the one surface the loop uses (seed 003 section 10).

`send_system_prompt`, `send_user_message`, `get_response`. `get_response` appends the
assistant reply to the history. Providers only implement `_complete`, which turns the
history into one request; history, tool-name encoding and usage accounting live here once.
"""

from __future__ import annotations

import abc
import time
from collections.abc import Callable

from prometheus_client import Histogram

from coding_agent.llm.hygiene import clean_text, screen_reply
from coding_agent.llm.types import LLMReply, Message, TokenUsage, ToolSpec

__all__ = ["LLMClient", "UsageListener", "MODEL_LATENCY"]

UsageListener = Callable[[TokenUsage], None]

# Registered by the dashboard's /metrics (web/metrics.py); none here, so nothing global.
MODEL_LATENCY = Histogram(
    "coding_agent_model_request_duration_seconds",
    "Time for the model to answer one request (retries included), by outcome",
    ["outcome"],
    buckets=(0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 20.0, 30.0, 60.0, 120.0, 300.0),
    registry=None,
)


class LLMClient(abc.ABC):
    """A conversation with one model.

    `tools` is set when the native tool-calling protocol is used: every MCP tool is
    offered with its JSON schema; names are encoded for the wire by the provider and
    decoded back to `server/tool` in the reply.
    """

    def __init__(self) -> None:
        self.messages: list[Message] = []
        self.tools: list[ToolSpec] = []
        self.usage = TokenUsage()
        self._usage_listeners: list[UsageListener] = []

    def send_system_prompt(self, text: str) -> None:
        """Set the system prompt (replacing an earlier one) at the head of the history."""
        text = clean_text(text)
        if self.messages and self.messages[0]["role"] == "system":
            self.messages[0] = {"role": "system", "content": text}
        else:
            self.messages.insert(0, {"role": "system", "content": text})

    def send_user_message(self, text: str, *, join: str | None = None) -> None:
        """Add a user turn. With `join`: when the last message is a user turn starting with
        `join` right after the latest assistant turn (an earlier result of the same reply's
        calls), `text` is added to it instead, as chat templates that insist on alternating
        roles (Mistral's) refuse two user turns in a row. The joined turn has not been sent
        yet, so every request still extends the one before it."""
        text = clean_text(text)
        if join is not None and len(self.messages) >= 2:
            last, before = self.messages[-1], self.messages[-2]
            content = last.get("content")
            after_assistant = last.get("role") == "user" and before.get("role") == "assistant"
            if after_assistant and isinstance(content, str) and content.startswith(join):
                self.messages[-1] = {"role": "user", "content": f"{content}\n\n{text}"}
                return
        self.messages.append({"role": "user", "content": text})

    def send_tool_result(self, call_id: str, name: str, text: str) -> None:
        """Answer a native tool call (tool-calling protocol only)."""
        self.messages.append({"role": "tool", "tool_call_id": call_id, "name": name, "content": clean_text(text)})

    def set_tools(self, tools: list[ToolSpec]) -> None:
        self.tools = list(tools)

    def on_usage(self, listener: UsageListener) -> None:
        """Call `listener` with the usage of every completed request (token accounting)."""
        self._usage_listeners.append(listener)

    async def get_response(self) -> LLMReply:
        """Ask the model for the next turn and append it to the history.

        The reply is screened first (`llm/hygiene.py`): whatever the model sent, the
        history holds only text that can be stored, posted and sent back.
        """
        started = time.monotonic()
        try:
            completed = await self._complete(self.messages, self.tools)
        except Exception:  # not a cancellation (a pause or a stop): the request did not end
            MODEL_LATENCY.labels("error").observe(time.monotonic() - started)
            raise
        MODEL_LATENCY.labels("ok").observe(time.monotonic() - started)
        reply = screen_reply(completed)
        self.messages.append(self._assistant_message(reply))
        self.usage = self.usage + reply.usage
        for listener in self._usage_listeners:
            listener(reply.usage)
        return reply

    @staticmethod
    def _assistant_message(reply: LLMReply) -> Message:
        message: Message = {"role": "assistant", "content": reply.content}
        if reply.tool_calls:
            message["tool_calls"] = [
                {"id": call.id, "type": "function", "function": {"name": call.name, "arguments": call.arguments}}
                for call in reply.tool_calls
            ]
        return message

    @abc.abstractmethod
    async def _complete(self, messages: list[Message], tools: list[ToolSpec]) -> LLMReply:
        """Send one request. Tool names in `messages` and `tools` are real `server/tool` names."""

    async def aclose(self) -> None:  # noqa: B027 - a default: clients without connections keep it
        """Release the HTTP client."""

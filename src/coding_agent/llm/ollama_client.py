"""`provider: ollama`: Ollama's native `/api/chat` through the official `ollama` client.

The native endpoint, not Ollama's OpenAI-compatible one, because only the native one
takes `options.num_ctx`: without it Ollama cuts long prompts to its default window
silently (SPEC 5). Ollama tool calls carry no ids, so stable ones are made up here.
"""

from __future__ import annotations

import time
from typing import Any

import httpx
import ollama
import pydantic

from coding_agent.errors import LLMError, ToolsRefused, TransientError
from coding_agent.llm.base import LLMClient
from coding_agent.llm.tls import shared_tls_context
from coding_agent.llm.tool_names import ToolNameCodec, parse_tool_arguments
from coding_agent.llm.tool_support import is_tools_refusal
from coding_agent.llm.types import LLMReply, Message, TokenUsage, ToolCallRequest, ToolSpec
from coding_agent.llm.wire_history import WireHistory
from coding_agent.retry import RetryPolicy, parse_retry_after, retry_async

__all__ = ["OllamaClient", "load_library"]


def _wire_tool(name: str, description: str, schema: dict[str, Any]) -> dict[str, Any]:
    parameters = schema or {"type": "object", "properties": {}}
    return {"type": "function", "function": {"name": name, "description": description, "parameters": parameters}}


def load_library() -> None:
    """What a first client would load: the shared TLS context (the SDK is imported with
    this module)."""
    shared_tls_context("httpx")


class OllamaClient(LLMClient):
    """A conversation with one model on an Ollama server."""

    def __init__(
        self,
        *,
        model: str,
        endpoint: str,
        retry: RetryPolicy,
        context_length: int = 32768,
        max_tokens: int = 4096,
        temperature: float = 0.2,
        timeout_seconds: float = 300,
    ) -> None:
        super().__init__()
        self.model = model
        self._endpoint = endpoint.rstrip("/")
        self._retry = retry
        self._options = {"num_ctx": context_length, "num_predict": max_tokens, "temperature": temperature}
        self._last_retry_after: str | None = None
        self._wire = WireHistory(self._wire_message)
        self._client = ollama.AsyncClient(
            host=self._endpoint,
            timeout=timeout_seconds,
            event_hooks={"response": [self._remember_response]},
            verify=shared_tls_context("httpx"),
        )

    async def _remember_response(self, response: httpx.Response) -> None:
        """Keep Retry-After: the library's ResponseError carries only status and text."""
        self._last_retry_after = response.headers.get("retry-after")

    async def _complete(self, messages: list[Message], tools: list[ToolSpec]) -> LLMReply:
        codec = ToolNameCodec(tool.name for tool in tools)
        wire_messages = self._wire.messages(messages, codec)
        wire_tools = [_wire_tool(codec.encode(t.name), t.description, t.input_schema) for t in tools]
        started = time.monotonic()
        response = await retry_async(
            lambda: self._chat(wire_messages, wire_tools), self._retry, f"llm POST {self._endpoint}/api/chat"
        )
        return self._reply(response, codec, time.monotonic() - started)

    async def _chat(self, messages: list[dict[str, Any]], tools: list[dict[str, Any]]) -> ollama.ChatResponse:
        """POST /api/chat through the library's transport and response model.

        Not `AsyncClient.chat`: it re-validates tools into a shallow model that drops
        nested object properties, `anyOf`, defaults and `additionalProperties` from the
        schemas, and the model should see each MCP tool's schema whole.
        """
        body: dict[str, Any] = {"model": self.model, "messages": messages, "stream": False, "options": self._options}
        if tools:
            body["tools"] = tools
        self._last_retry_after = None
        try:
            return await self._client._request(ollama.ChatResponse, "POST", "/api/chat", json=body, stream=False)
        except ollama.ResponseError as error:
            words = str(error.error)[:500]
            message = f"ollama server answered HTTP {error.status_code}: {words}"
            if tools and is_tools_refusal(words):  # "registry.ollama.ai/library/M does not support tools"
                advice = "the model refuses native tool calls: llm.function_calling: auto or false"
                raise ToolsRefused(f"{message} ({advice})", words) from None
            if error.status_code >= 500 or error.status_code == 429:
                raise TransientError(message, retry_after=parse_retry_after(self._last_retry_after)) from None
            raise LLMError(message) from None
        except httpx.TimeoutException:
            raise TransientError("ollama request timed out") from None
        except (ConnectionError, httpx.TransportError):
            raise TransientError(f"cannot reach the ollama server at {self._endpoint}") from None
        except pydantic.ValidationError as error:
            problems = error.error_count()
            raise LLMError(f"ollama server sent a reply that is not a chat response ({problems} problems)") from None
        except (ValueError, TypeError) as error:  # a body that is not JSON text (bad UTF-8)
            kind = type(error).__name__
            raise LLMError(f"ollama server sent a reply that is not a chat response ({kind})") from None

    def _reply(self, response: ollama.ChatResponse, codec: ToolNameCodec, duration: float) -> LLMReply:
        try:
            return self._read_reply(response, codec, duration)
        except (TypeError, AttributeError, ValueError, KeyError, IndexError) as error:
            kind = type(error).__name__
            raise LLMError(f"ollama server sent a reply that is not a chat response ({kind})") from None

    def _read_reply(self, response: ollama.ChatResponse, codec: ToolNameCodec, duration: float) -> LLMReply:
        turn = sum(1 for message in self.messages if message["role"] == "assistant") + 1
        calls = tuple(
            ToolCallRequest(
                id=f"call_{turn}_{index}",
                name=codec.decode_or_keep(call.function.name),
                arguments=parse_tool_arguments(dict(call.function.arguments)),
            )
            for index, call in enumerate(response.message.tool_calls or [])
        )
        return LLMReply(
            content=response.message.content or "",
            tool_calls=calls,
            usage=TokenUsage(response.prompt_eval_count or 0, response.eval_count or 0),
            duration_seconds=duration,
        )

    @staticmethod
    def _wire_message(message: Message, codec: ToolNameCodec) -> dict[str, Any]:
        """One history message in Ollama form: encoded names, arguments as objects."""
        role = message["role"]
        if role == "tool":
            wire_tool: dict[str, Any] = {"role": "tool", "content": message.get("content", "")}
            if message.get("name"):
                wire_tool["tool_name"] = codec.encode(message["name"])
            return wire_tool
        wire: dict[str, Any] = {"role": role, "content": message.get("content") or ""}
        calls = message.get("tool_calls")
        if role == "assistant" and calls:
            wire["tool_calls"] = [
                {
                    "function": {
                        "name": codec.encode(call["function"]["name"]),
                        "arguments": parse_tool_arguments(call["function"].get("arguments")),
                    }
                }
                for call in calls
            ]
        return wire

    async def aclose(self) -> None:
        await self._client.close()

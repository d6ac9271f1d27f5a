"""`provider: openai` and `provider: lmstudio`: any server speaking OpenAI chat completions.

Uses the official SDK with its own retries switched off, so that the project's one retry
policy (SPEC 4) decides, and translates the SDK's errors into `TransientError` /
`LLMError` with messages that are safe to post on an issue.
"""

from __future__ import annotations

import json
import time
from typing import Any

import openai

from coding_agent.errors import LLMError, ToolsRefused, TransientError
from coding_agent.llm.base import LLMClient
from coding_agent.llm.tls import shared_tls_context
from coding_agent.llm.tool_names import RAW_ARGUMENTS_KEY, ToolNameCodec, parse_tool_arguments
from coding_agent.llm.tool_support import is_tools_refusal
from coding_agent.llm.types import LLMReply, Message, TokenUsage, ToolCallRequest, ToolSpec
from coding_agent.llm.wire_history import WireHistory
from coding_agent.redaction import Redactor
from coding_agent.retry import RetryPolicy, parse_retry_after, retry_async

__all__ = ["OpenAICompatibleClient", "LMSTUDIO_DEFAULT_API_KEY", "load_library"]

LMSTUDIO_DEFAULT_API_KEY = "lm-studio"
_NO_API_KEY = "no-api-key"  # local OpenAI-compatible servers ignore the key, the SDK insists on one
_MAX_SERVER_MESSAGE = 500


def _http_library() -> str:
    """The HTTP library this openai SDK is built on (`httpx`, or `httpx2` in later versions)."""
    return openai.DefaultAsyncHttpxClient.__mro__[1].__module__.partition(".")[0]


def _sdk_client(base_url: str, api_key: str, timeout_seconds: float) -> openai.AsyncOpenAI:
    """The SDK's client as every conversation has it: its retries off, the shared TLS context."""
    return openai.AsyncOpenAI(
        base_url=base_url,
        api_key=api_key,
        timeout=timeout_seconds,
        max_retries=0,
        http_client=openai.DefaultAsyncHttpxClient(verify=shared_tls_context(_http_library())),
    )


def load_library() -> None:
    """What the SDK and this module load on a first client's first use, loaded now: the
    shared TLS context and the SDK's resource modules (imported as a client first touches
    them). A throwaway client, made as a conversation's is, which sends nothing."""
    client = _sdk_client("http://127.0.0.1", _NO_API_KEY, 1.0)
    client.chat.completions, client.models  # noqa: B018 - each is imported as it is first read


def _server_message(body: object, fallback: str) -> str:
    """The human part of an error body: OpenAI's `error.message`, Ollama's `error`, or text."""
    message: object = None
    if isinstance(body, dict):
        error = body.get("error", body.get("message"))
        message = error.get("message") if isinstance(error, dict) else error
    elif isinstance(body, str):
        message = body
    text = str(message) if message else fallback
    return text if len(text) <= _MAX_SERVER_MESSAGE else text[:_MAX_SERVER_MESSAGE] + "..."


class OpenAICompatibleClient(LLMClient):
    """A conversation with an OpenAI-compatible chat-completions server."""

    def __init__(
        self,
        *,
        model: str,
        base_url: str,
        api_key: str | None,
        retry: RetryPolicy,
        max_tokens: int = 4096,
        temperature: float = 0.2,
        timeout_seconds: float = 300,
        provider: str = "openai",
    ) -> None:
        super().__init__()
        self.model = model
        self.provider = provider
        self._retry = retry
        self._max_tokens = max_tokens
        self._temperature = temperature
        self._base_url = base_url.rstrip("/")
        self._api_key = api_key or (LMSTUDIO_DEFAULT_API_KEY if provider == "lmstudio" else _NO_API_KEY)
        self._client = _sdk_client(self._base_url, self._api_key, timeout_seconds)
        self._codec: tuple[tuple[str, ...], ToolNameCodec] | None = None  # of the last tool list
        self._wire = WireHistory(self._wire_message)

    async def _complete(self, messages: list[Message], tools: list[ToolSpec]) -> LLMReply:
        codec = self._codec_of(tools)
        request: dict[str, Any] = {
            "model": self.model,
            "messages": self._wire.messages(messages, codec),
            "max_tokens": self._max_tokens,
            "temperature": self._temperature,
        }
        if tools:
            request["tools"] = [
                {
                    "type": "function",
                    "function": {
                        "name": codec.encode(tool.name),
                        "description": tool.description,
                        "parameters": tool.input_schema or {"type": "object", "properties": {}},
                    },
                }
                for tool in tools
            ]
        started = time.monotonic()
        response = await retry_async(
            lambda: self._create(request), self._retry, f"llm POST {self._base_url}/chat/completions"
        )
        return self._reply(response, codec, time.monotonic() - started)

    def _codec_of(self, tools: list[ToolSpec]) -> ToolNameCodec:
        names = tuple(tool.name for tool in tools)
        if self._codec is None or self._codec[0] != names:
            self._codec = (names, ToolNameCodec(names))
        return self._codec[1]

    async def _create(self, request: dict[str, Any]) -> Any:
        """One chat completion. All but `model` goes as `extra_body`, which the SDK sends as
        it is: `create`'s own arguments are run through `async_maybe_transform`, a typed
        walk of every message of the history that costs more than all the rest of the
        host's work per step (figures in docs/performance.md), and our request is plain
        JSON already (nothing to alias, no dates or files), so the walk changes nothing.
        The body sent is the same, key order included (tests/integration/test_llm_providers.py)."""
        rest = {key: value for key, value in request.items() if key != "model"}
        try:
            return await self._client.chat.completions.create(model=request["model"], messages=[], extra_body=rest)
        except openai.APITimeoutError:
            raise TransientError(f"{self.provider} request timed out") from None
        except openai.APIConnectionError as error:
            where = f"the {self.provider} server at {self._base_url}"
            raise TransientError(f"cannot reach {where}: {error.message}") from None
        except openai.APIStatusError as error:
            raise self._status_error(error, offered_tools=bool(rest.get("tools"))) from None
        except openai.OpenAIError as error:
            raise LLMError(Redactor([self._api_key]).text(f"{self.provider} request failed: {error}")) from None
        except (ValueError, TypeError) as error:  # the SDK parsing a body that is not JSON text (bad UTF-8)
            kind = type(error).__name__
            raise LLMError(f"{self.provider} server sent a reply that is not a chat completion ({kind})") from None

    def _status_error(self, error: openai.APIStatusError, offered_tools: bool) -> Exception:
        """The error to raise for an HTTP error: a refusal of the tools offered (never
        retried, even as a 500: llama.cpp's), a transient one, or a failure for good."""
        status = error.status_code
        detail = _server_message(error.body, error.response.reason_phrase or "no details")
        message = Redactor([self._api_key]).text(f"{self.provider} server answered HTTP {status}: {detail}")
        if offered_tools and is_tools_refusal(detail):
            words = Redactor([self._api_key]).text(detail)
            return ToolsRefused(f"{message} (the server refuses native tool calls: llm.function_calling: auto or false)", words)
        if status >= 500 or status == 429:
            return TransientError(message, retry_after=parse_retry_after(error.response.headers.get("retry-after")))
        return LLMError(message)

    def _reply(self, response: Any, codec: ToolNameCodec, duration: float) -> LLMReply:
        """The reply of a completion; a body of the wrong shape is an `LLMError` naming it.

        The SDK builds its response objects without validation, so a server (or a model
        whose output a server passes through) can put any JSON type anywhere.
        """
        try:
            return self._read_reply(response, codec, duration)
        except (TypeError, AttributeError, ValueError, KeyError, IndexError) as error:
            kind = type(error).__name__
            raise LLMError(f"{self.provider} server sent a reply that is not a chat completion ({kind})") from None

    def _read_reply(self, response: Any, codec: ToolNameCodec, duration: float) -> LLMReply:
        if not response.choices:
            raise LLMError(f"{self.provider} server returned no choices for model {self.model}")
        message = response.choices[0].message
        calls: list[ToolCallRequest] = []
        for index, call in enumerate(message.tool_calls or []):
            function = getattr(call, "function", None)
            if function is None:  # a custom (non-function) tool call: not something we offered
                continue
            calls.append(
                ToolCallRequest(
                    id=call.id or f"call_{len(self.messages)}_{index}",
                    name=codec.decode_or_keep(function.name),
                    arguments=parse_tool_arguments(function.arguments),
                )
            )
        usage = response.usage
        return LLMReply(
            content=message.content or "",
            tool_calls=tuple(calls),
            usage=TokenUsage(usage.prompt_tokens or 0, usage.completion_tokens or 0) if usage else TokenUsage(),
            duration_seconds=duration,
        )

    @staticmethod
    def _wire_message(message: Message, codec: ToolNameCodec) -> dict[str, Any]:
        """One history message in OpenAI form: encoded names, arguments as JSON text."""
        role = message["role"]
        if role == "tool":
            content = message.get("content") or ""
            return {"role": "tool", "tool_call_id": message.get("tool_call_id", ""), "content": content}
        wire: dict[str, Any] = {"role": role, "content": message.get("content") or ""}
        calls = message.get("tool_calls")
        if role == "assistant" and calls:
            wire["tool_calls"] = [
                {
                    "id": call["id"],
                    "type": "function",
                    "function": {
                        "name": codec.encode(call["function"]["name"]),
                        "arguments": _arguments_text(call["function"].get("arguments")),
                    },
                }
                for call in calls
            ]
        return wire

    async def aclose(self) -> None:
        await self._client.close()


def _arguments_text(arguments: Any) -> str:
    """Arguments as the model sent them: a raw string kept on parse failure goes back as is."""
    if isinstance(arguments, str):
        return arguments
    if isinstance(arguments, dict) and set(arguments) == {RAW_ARGUMENTS_KEY}:
        return str(arguments[RAW_ARGUMENTS_KEY])
    return json.dumps(arguments or {}, ensure_ascii=False)


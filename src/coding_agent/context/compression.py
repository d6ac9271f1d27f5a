"""Context compression (SPEC 9.3): summarise older messages once the prompt grows too long.

Below `compression_threshold` x `context_length` estimated tokens nothing happens, and
the history only ever grows at its end: every request starts with the whole previous
one, which is what lets llama.cpp, Ollama and vLLM reuse their prompt cache. Above it,
the messages between the task prompt and the newest `keep_recent_messages` are replaced
by one summary written by the model, recorded in `summaries.jsonl`; `messages.jsonl`
keeps the full history and `current.jsonl` what is sent from now on.

The system prompt and the first user turn (the task) always stay. The kept tail never
starts with a tool result: its tool call is kept with it, as the APIs require.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Awaitable, Callable, Sequence

from coding_agent.context.storage import RunContextFiles
from coding_agent.context.windows import compression_cut
from coding_agent.errors import AgentError
from coding_agent.llm.base import LLMClient
from coding_agent.llm.reply_text import strip_think
from coding_agent.llm.types import Message, TokenUsage, ToolSpec
from coding_agent.prompts.context_prompts import SUMMARY_HEADING, SUMMARY_SYSTEM_PROMPT, render_summary_request

__all__ = ["Compressor", "Summarizer", "estimate_tokens", "fallback_summary", "model_summarizer"]

log = logging.getLogger(__name__)

Summarizer = Callable[[list[Message]], Awaitable[str]]
_FALLBACK_ITEM_CHARS = 200


def _text_tokens(text: str) -> int:
    """~4 characters per token for ASCII, one per character otherwise (CJK is dense).

    Counted in C (`isascii`, `encode`): this runs over the whole history before every
    request, so a Python loop per character cost milliseconds per step on long runs."""
    ascii_chars = len(text) if text.isascii() else len(text.encode("ascii", "ignore"))
    return ascii_chars // 4 + (len(text) - ascii_chars)


def estimate_tokens(messages: Sequence[Message], tools: Sequence[ToolSpec] = ()) -> int:
    """A server-independent estimate of a request's prompt tokens (no tokenizer needed)."""
    return sum(_message_tokens(message) for message in messages) + _tools_tokens(tools)


def _message_tokens(message: Message) -> int:
    total = 4  # role and framing
    content = message.get("content")
    if isinstance(content, str):
        total += _text_tokens(content)
    for call in message.get("tool_calls") or []:
        total += _text_tokens(json.dumps(call, ensure_ascii=False))
    return total


def _tools_tokens(tools: Sequence[ToolSpec]) -> int:
    return sum(
        _text_tokens(tool.name + tool.description + json.dumps(tool.input_schema, ensure_ascii=False)) for tool in tools
    )


def fallback_summary(messages: Sequence[Message]) -> str:
    """A summary without the model (when the summary request fails): what was said and called."""
    lines = []
    for message in messages:
        content = message.get("content")
        text = content.strip().replace("\n", " ") if isinstance(content, str) else ""
        calls = [str((call.get("function") or {}).get("name")) for call in message.get("tool_calls") or []]
        if calls:
            text = (text + " " if text else "") + f"[called {', '.join(calls)}]"
        if text:
            lines.append(f"- {message.get('role')}: {text[:_FALLBACK_ITEM_CHARS]}")
    return "\n".join(lines) or "(nothing to summarise)"


def _head_length(messages: Sequence[Message]) -> int:
    """Messages that always stay: up to and including the first user turn (the task)."""
    for index, message in enumerate(messages):
        if message.get("role") == "user":
            return index + 1
    return len(messages)


class Compressor:
    """Keeps one run's prompt under the threshold; one instance per run."""

    def __init__(
        self,
        context_length: int,
        threshold: float,
        keep_recent_messages: int,
        summarize: Summarizer,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.limit = int(context_length * threshold)
        self.keep_recent = keep_recent_messages
        self._summarize = summarize
        self._clock = clock
        self.compressions = 0
        # What `_estimate` counted last: how many messages, their tokens, copies of the
        # first and the last of them, and the tools with their tokens.
        self._counted = 0
        self._counted_tokens = 0
        self._ends: tuple[Message, Message] | None = None
        self._tools: list[ToolSpec] = []
        self._tools_tokens = 0

    def _estimate(self, messages: list[Message], tools: list[ToolSpec]) -> int:
        """`estimate_tokens(messages, tools)`, counting only the messages added since the
        last call. Between compressions the history only grows at its end, and counting
        it whole before every request cost O(history) a step (0.9 ms at 80 messages with
        tool calls). A history that did not just grow (shorter, or its first or last
        counted message changed: a compression, a restore, a new system prompt) and
        changed tools are counted afresh. Compared by value: nothing is held by identity."""
        counted = self._counted
        if counted > len(messages) or (counted and self._ends != (messages[0], messages[counted - 1])):
            counted, self._counted_tokens = 0, 0
        self._counted_tokens += sum(_message_tokens(message) for message in messages[counted:])
        self._counted = len(messages)
        self._ends = (dict(messages[0]), dict(messages[-1])) if messages else None
        if tools != self._tools:
            self._tools, self._tools_tokens = list(tools), _tools_tokens(tools)
        return self._counted_tokens + self._tools_tokens

    async def maybe_compress(self, llm: LLMClient, files: RunContextFiles) -> bool:
        """Compress `llm.messages` in place when over the limit; True when it did."""
        messages = llm.messages
        before = self._estimate(messages, llm.tools)
        if before <= self.limit:
            return False
        head = _head_length(messages)
        cut = compression_cut(len(messages), head, self.keep_recent, lambda i: messages[i].get("role") == "tool")
        older = messages[head:cut]
        if len(older) < 2:  # nothing worth a summary request: the recent messages alone are long
            return False
        files.sync_messages(messages)  # the full history is on disk before it leaves memory
        try:
            summary = (await self._summarize(list(older))).strip()
        except AgentError as error:
            log.warning("the summary request failed (%s); a plain list of the steps replaces them", error)
            summary = ""
        summary = summary or fallback_summary(older)
        kept = len(messages) - cut
        compressed = [*messages[:head], {"role": "user", "content": f"{SUMMARY_HEADING}\n{summary}"}, *messages[cut:]]
        llm.messages[:] = compressed
        after = self._estimate(compressed, llm.tools)
        self.compressions += 1
        files.record_summary(
            {
                "at": self._clock(),
                "summary": summary,
                "summarised_messages": len(older),
                "kept_messages": kept,
                "tokens_before": before,
                "tokens_after": after,
            },
            compressed,
        )
        log.info("context compressed: %d messages summarised, ~%d -> ~%d tokens", len(older), before, after)
        return True


def model_summarizer(new_client: Callable[[], LLMClient], on_usage: Callable[[TokenUsage], None]) -> Summarizer:
    """A `Summarizer` asking the run's model in a conversation of its own.

    Its own conversation (a fresh client), so the run's history is not disturbed and a
    replay script can answer it by matching `SUMMARY_REQUEST_MARK`; its tokens count
    towards the run through `on_usage`.
    """

    async def summarize(messages: list[Message]) -> str:
        client = new_client()
        client.on_usage(on_usage)
        try:
            client.send_system_prompt(SUMMARY_SYSTEM_PROMPT)
            client.send_user_message(render_summary_request(messages))
            reply = await client.get_response()
        finally:
            await client.aclose()
        return strip_think(reply.content)

    return summarize

"""Model output made safe to store, post and send back (SPEC 15: "break the agent").

A reply is hostile input: valid JSON can carry a lone surrogate ("\\ud800") that no UTF-8
writer accepts, a NUL that PostgreSQL and git refuse, a `content` that is a number, or
10 MB of text. Each of these used to surface far from its cause (a context file write,
a comment POST) as a crash. Everything that enters the conversation history passes
through here once, at the LLM boundary, so the rest of the agent only ever sees text it
can store, post and log; what cannot be repaired becomes `LLMReply.problem`, which the
reply protocols answer with a correction message like any other unusable reply.
"""

from __future__ import annotations

import json
from dataclasses import replace
from typing import Any

from coding_agent.llm.types import LLMReply, ToolCallRequest

__all__ = ["clean_text", "clean_value", "screen_reply", "MAX_REPLY_CHARS"]

# A reply longer than this is not a reply but a runaway generation: at ~4 characters a
# token it is 50k tokens, more than `max_tokens` of any configured model and more than
# the context of most. Kept whole it would be sent back on every later request.
MAX_REPLY_CHARS = 200_000
_KEPT_OF_OVERSIZED = 2_000
REPLACEMENT = "\ufffd"


def clean_text(text: str) -> str:
    """`text` with lone surrogates and NUL replaced by U+FFFD; valid text unchanged.

    Pairs of surrogates (a JSON-escaped astral character) are joined into the character
    they encode, as a UTF-16 decoder would.
    """
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        text = text.encode("utf-16-le", "surrogatepass").decode("utf-16-le", "replace")
    return text.replace("\x00", REPLACEMENT) if "\x00" in text else text


def clean_value(value: Any) -> Any:
    """Every string of a JSON-like value (keys included) passed through `clean_text`."""
    if isinstance(value, str):
        return clean_text(value)
    if isinstance(value, dict):
        return {clean_text(str(key)): clean_value(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [clean_value(item) for item in value]
    return value


def _size(reply: LLMReply) -> int:
    return len(reply.content) + sum(
        len(call.name) + len(json.dumps(call.arguments, ensure_ascii=False, default=str)) for call in reply.tool_calls
    )


def screen_reply(reply: LLMReply) -> LLMReply:
    """`reply` as the agent may keep it: clean text, and `problem` set when it is unusable.

    Content that is not text, or a reply over `MAX_REPLY_CHARS`, is unusable: its text is
    cut to a short head (so the history stays small) and its tool calls are dropped.
    """
    problem = reply.problem
    content: Any = reply.content
    if content is None:
        content = ""
    if not isinstance(content, str):
        problem = problem or f"the reply's content must be text, not {type(content).__name__}"
        content = ""
    calls = tuple(
        ToolCallRequest(
            id=clean_text(str(call.id)),
            name=clean_text(str(call.name)),
            arguments=clean_value(call.arguments) if isinstance(call.arguments, dict) else {},
        )
        for call in reply.tool_calls
    )
    screened = replace(reply, content=clean_text(content), tool_calls=calls, problem=problem)
    size = _size(screened)
    if size > MAX_REPLY_CHARS:
        cut = f"\n[... reply cut: {size} characters, over the limit of {MAX_REPLY_CHARS}]"
        return replace(
            screened,
            content=screened.content[:_KEPT_OF_OVERSIZED] + cut,
            tool_calls=(),
            problem=problem or f"the reply was {size} characters long, over the limit of {MAX_REPLY_CHARS}; keep replies short",
        )
    return screened

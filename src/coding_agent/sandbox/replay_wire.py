"""How the replay model's scripted step goes over the wire (see `replay_model.py`).

A step is rendered for the tools the request offered (`render_step`: a native tool call
when the request offers tools, seed 003's JSON text when it does not), and the rendered
reply is sent in OpenAI's form (`openai_reply`: a chat completion, or its SSE chunks)
or Ollama's (`ollama_reply`: /api/chat, whole or NDJSON), with the usage a server
reports. Scripted HTTP errors keep each provider's error body (`error_response`).
"""

from __future__ import annotations

import json
import time
from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from starlette.requests import Request
from starlette.responses import JSONResponse as _StarletteJSONResponse, Response, StreamingResponse

from coding_agent.llm.tool_names import match_offered_name, wire_candidates
from coding_agent.sandbox.replay_script import PHASE_FORMS, ReplayStep

__all__ = [
    "Rendered",
    "RenderedCall",
    "render_step",
    "JSONResponse",
    "offered_names",
    "error_response",
    "json_body",
    "openai_reply",
    "ollama_reply",
]


@dataclass(frozen=True)
class RenderedCall:
    id: str
    name: str
    arguments: str | dict[str, Any]

    def arguments_text(self) -> str:
        return self.arguments if isinstance(self.arguments, str) else json.dumps(self.arguments, ensure_ascii=False)

    def arguments_object(self) -> dict[str, Any] | str:
        """Ollama sends arguments as an object; text that is not one goes as it is."""
        if isinstance(self.arguments, dict):
            return self.arguments
        try:
            value = json.loads(self.arguments)
        except json.JSONDecodeError:
            return self.arguments
        return value if isinstance(value, dict) else self.arguments


@dataclass(frozen=True)
class Rendered:
    content: str
    calls: tuple[RenderedCall, ...]


def render_step(step: ReplayStep, offered: list[str], call_prefix: str) -> Rendered:
    """The reply for a request that offered the functions `offered` (empty: JSON text)."""
    if step.kind == "text":
        calls = tuple(
            RenderedCall(f"{call_prefix}_{i}", call.name, call.arguments) for i, call in enumerate(step.tool_calls)
        )
        return Rendered(step.text, calls)
    if step.kind in PHASE_FORMS:
        tool, tag = PHASE_FORMS[step.kind]
        body = {**step.args, **({"comment": step.comment} if step.comment else {})}
        name = match_offered_name(tool, offered) if offered else None
        if name is not None:
            return Rendered("", (RenderedCall(f"{call_prefix}_0", name, body),))
        obj = {"phase": tag, **body} if tag is not None else {"action_done": body}
        return Rendered(json.dumps(obj, ensure_ascii=False), ())
    if step.kind == "tool":
        if not offered:
            command = {"tool": step.tool, "args": step.args}
            return Rendered(json.dumps({"comment": step.comment, "command": command}, ensure_ascii=False), ())
        name = match_offered_name(step.tool, offered) or wire_candidates(step.tool)[0]
        return Rendered(step.comment, (RenderedCall(f"{call_prefix}_0", name, step.args),))
    # done
    if not offered:
        return Rendered(json.dumps({"done": True, "comment": step.comment}, ensure_ascii=False), ())
    done_name = match_offered_name("done", offered)
    if done_name is None:  # tools offered but no `done` function: a final message ends the task
        return Rendered(step.comment, ())
    return Rendered("", (RenderedCall(f"{call_prefix}_0", done_name, {"comment": step.comment}),))


class JSONResponse(_StarletteJSONResponse):
    """JSON with non-ASCII escaped, as many servers send it: a lone surrogate the script
    holds ("\\ud800") goes out as valid JSON instead of failing to encode."""

    def render(self, content: Any) -> bytes:
        return json.dumps(content, allow_nan=False, separators=(",", ":")).encode("ascii")


def offered_names(body: Mapping[str, Any]) -> list[str]:
    names = []
    for tool in body.get("tools") or []:
        function = tool.get("function") if isinstance(tool, Mapping) else None
        if isinstance(function, Mapping) and isinstance(function.get("name"), str):
            names.append(function["name"])
    return names


def _pieces(text: str, size: int = 16) -> list[str]:
    return [text[i : i + size] for i in range(0, len(text), size)]


def _estimate_tokens(text: str) -> int:
    return max(1, len(text) // 4)


def _usage(body: Mapping[str, Any], rendered: Rendered) -> tuple[int, int]:
    prompt = _estimate_tokens(json.dumps(body.get("messages") or [], ensure_ascii=False))
    completion = _estimate_tokens(rendered.content + "".join(call.arguments_text() for call in rendered.calls))
    return prompt, completion


def error_response(step: ReplayStep, openai_form: bool) -> Response:
    headers = {"Retry-After": f"{step.retry_after:g}"} if step.retry_after is not None else {}
    if openai_form:
        body: dict[str, Any] = {"error": {"message": step.message, "type": "replay_error", "code": step.status}}
    else:
        body = {"error": step.message}
    return JSONResponse(body, status_code=step.status, headers=headers)


async def json_body(request: Request) -> dict[str, Any] | Response:
    try:
        body = await request.json()
    except (json.JSONDecodeError, UnicodeDecodeError):
        return JSONResponse({"error": {"message": "request body is not JSON"}}, status_code=400)
    if not isinstance(body, dict):
        return JSONResponse({"error": {"message": "request body must be a JSON object"}}, status_code=400)
    return body


def openai_reply(
    body: dict[str, Any], conversation: str, index: int, rendered: Rendered, default_model: str
) -> Response:
    """The chat completion of `rendered`, whole or streamed (with usage when asked), as OpenAI sends it."""
    prompt, completion = _usage(body, rendered)
    usage = {"prompt_tokens": prompt, "completion_tokens": completion, "total_tokens": prompt + completion}
    base = {
        "id": f"chatcmpl-{conversation}-{index}",
        "object": "chat.completion",
        "created": int(time.time()),
        "model": str(body.get("model") or default_model),
    }
    if body.get("stream"):
        include_usage = bool((body.get("stream_options") or {}).get("include_usage"))
        stream_base = {**base, "object": "chat.completion.chunk"}
        return StreamingResponse(
            _openai_stream(stream_base, rendered, usage if include_usage else None), media_type="text/event-stream"
        )
    finish = "tool_calls" if rendered.calls else "stop"
    choice = {"index": 0, "message": _openai_message(rendered), "finish_reason": finish, "logprobs": None}
    return JSONResponse({**base, "choices": [choice], "usage": usage})


def _openai_message(rendered: Rendered) -> dict[str, Any]:
    message: dict[str, Any] = {"role": "assistant", "content": rendered.content or None}
    if rendered.calls:
        message["tool_calls"] = [
            {"id": call.id, "type": "function", "function": {"name": call.name, "arguments": call.arguments_text()}}
            for call in rendered.calls
        ]
    return message


async def _openai_stream(
    base: dict[str, Any], rendered: Rendered, usage: dict[str, int] | None
) -> AsyncIterator[str]:
    """Chat-completion chunks as OpenAI streams them: role, text and tool-call deltas, usage."""

    def chunk(delta: dict[str, Any], finish: str | None = None) -> str:
        payload = {**base, "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]}
        return f"data: {json.dumps(payload)}\n\n"

    yield chunk({"role": "assistant", "content": ""})
    for piece in _pieces(rendered.content):
        yield chunk({"content": piece})
    for index, call in enumerate(rendered.calls):
        head = {"index": index, "id": call.id, "type": "function", "function": {"name": call.name, "arguments": ""}}
        yield chunk({"tool_calls": [head]})
        for piece in _pieces(call.arguments_text()):
            yield chunk({"tool_calls": [{"index": index, "function": {"arguments": piece}}]})
    yield chunk({}, "tool_calls" if rendered.calls else "stop")
    if usage is not None:
        yield f"data: {json.dumps({**base, 'choices': [], 'usage': usage})}\n\n"
    yield "data: [DONE]\n\n"


def ollama_reply(body: dict[str, Any], rendered: Rendered, default_model: str) -> Response:
    """The /api/chat answer of `rendered`: NDJSON chunks unless `stream` is false, as Ollama sends it."""
    prompt, completion = _usage(body, rendered)
    base = {
        "model": str(body.get("model") or default_model),
        "created_at": datetime.now(UTC).isoformat().replace("+00:00", "Z"),
    }
    final = {
        **base,
        "done": True,
        "done_reason": "stop",
        "total_duration": 0,
        "load_duration": 0,
        "prompt_eval_count": prompt,
        "prompt_eval_duration": 0,
        "eval_count": completion,
        "eval_duration": 0,
    }
    if not body.get("stream", True):  # Ollama streams unless told otherwise
        return JSONResponse({**final, "message": _ollama_message(rendered, rendered.content)})
    lines = [
        {**base, "message": {"role": "assistant", "content": piece}, "done": False}
        for piece in _pieces(rendered.content)
    ]
    if rendered.calls:
        lines.append({**base, "message": _ollama_message(rendered, ""), "done": False})
    lines.append({**final, "message": {"role": "assistant", "content": ""}})
    return StreamingResponse(_ndjson(lines), media_type="application/x-ndjson")


def _ollama_message(rendered: Rendered, content: str) -> dict[str, Any]:
    message: dict[str, Any] = {"role": "assistant", "content": content}
    if rendered.calls:
        message["tool_calls"] = [
            {"function": {"name": call.name, "arguments": call.arguments_object()}} for call in rendered.calls
        ]
    return message


async def _ndjson(lines: list[dict[str, Any]]) -> AsyncIterator[str]:
    for line in lines:
        yield json.dumps(line) + "\n"

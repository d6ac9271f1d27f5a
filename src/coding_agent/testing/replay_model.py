"""The replay model server: a scripted stand-in for OpenAI, LM Studio and Ollama.

(The script's steps and loading are `replay_script.py`; its names are re-exported here.
Over 300 lines still: the three providers' wire forms are one server, read best together.)

Tests, benchmarks and `coding-agent demo` run the real provider clients against it over
real HTTP. One script drives every provider and both reply protocols: a scripted tool
call becomes a native tool call when the request offers tools, and the JSON-text reply
of seed 003 section 8 when it does not.

Script format (YAML, JSON or a dict)::

    model: replay-model         # optional name reported by /v1/models and /api/tags
    latency_seconds: 0          # optional fixed delay per reply (benchmarks)
    replies:                    # consumed in order, per conversation
      - tool: workspace/create
        args: {path: hello.txt, content: "hi"}
        comment: "Creating the file"
      - text: "no json here"    # literal assistant text; may come with raw `tool_calls`
        tool_calls: [{name: workspace__create, arguments: "{not json"}]
      - done: "Finished: wrote hello.txt"
      - status: 503             # answer with an HTTP error, then move on
        retry_after: 1
      - raw: '{"choices": 5}'   # the HTTP body exactly as given (200), for hostile replies:
                                # bytes, or text encoded as UTF-8 with surrogateescape
      - before: {post_comment: {body: "also add a README"}}   # optional on any reply:
        tool: workspace/view    # run these registered actions when its request arrives
        args: {path: hello.txt}
    conversations:              # optional, chosen by a substring of the first user message
      - match: "#7"
        replies: [...]
    phases:                     # planning mode (SPEC 10): replies keyed on the phase marker
      planning:                 # of the latest `[Phase: ...]` line the agent sent; the longest
        - plan: {goal_understanding: {...}, action_plan: {actions: [...]}}   # key it starts with
      execution a1:             # wins ("execution a1" matches "[Phase: execution a1 (1/3)]")
        - tool: workspace/create
          args: {path: a.txt, content: "a"}
        - action_done: {id: a1, status: done, summary: "wrote a.txt"}
      reflection:
        - reflection: {status: success, evaluation: "on track", plan_revision_needed: false}
      verification:
        - verification: {verification_passed: true}
      completion:
        - done: "All done."

Phase replies (`plan`, `action_done`, `reflection`, `revision`, `verification`) become
the native phase tool (`submit_plan`, `action_done`, `submit_reflection`, ...) when the
request offers it, else the JSON-in-text object tagged by `phase`. A request with no
marker, or whose phase list is used up, takes the next of `replies`.

A conversation is identified by its first user message; each has its own cursor, so
concurrent runs on one script do not interfere. An exhausted script answers `done`.

`before` actions are what happens in the world while the model "thinks": the test
registers them by name (`ReplaySandbox(script, actions={"post_comment": fn})`), and each
is called with its arguments when the request for that reply arrives, before it is
answered (e.g. post a comment on the sandbox forge, unassign the bot, create a file).
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import re
import threading
import time
from collections.abc import AsyncIterator, Iterable, Mapping
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse as _StarletteJSONResponse
from starlette.responses import Response, StreamingResponse
from starlette.routing import Route

from coding_agent.llm.tool_names import match_offered_name, wire_candidates
from coding_agent.testing.http_server import ServedApp
from coding_agent.testing.replay_script import (
    PHASE_FORMS,
    ConversationScript,
    RawToolCall,
    ReplayScript,
    ReplayStep,
    ScriptAction,
    ScriptSource,
    load_script,
)

__all__ = [
    "RawToolCall",
    "ReplayStep",
    "ConversationScript",
    "ReplayScript",
    "RecordedRequest",
    "ReplayModel",
    "ReplaySandbox",
    "ScriptSource",
    "ScriptAction",
    "create_replay_app",
    "EXHAUSTED_COMMENT",
]

# What /api/show reports as the replay model's context length (it has no real limit).
_REPLAY_CONTEXT_LENGTH = 131072

EXHAUSTED_COMMENT = "The replay script is exhausted: there are no more scripted replies."
_MARKER = re.compile(r"^\[Phase: ([^\]\n]+)\]")


# --- the state ------------------------------------------------------------------------


@dataclass(frozen=True)
class RecordedRequest:
    """A request as the model server received it, for assertions on what was sent."""

    path: str
    body: dict[str, Any]
    conversation: str
    headers: dict[str, str] = field(default_factory=dict)  # names in lower case


@dataclass(frozen=True)
class _Call:
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
class _Rendered:
    content: str
    calls: tuple[_Call, ...]


def _message_text(content: Any) -> str:
    """Text of a message content: a string, or OpenAI's list of parts."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(str(part.get("text", "")) for part in content if isinstance(part, Mapping))
    return ""


def _first_user_message(messages: Iterable[Any]) -> str:
    for message in messages:
        if isinstance(message, Mapping) and message.get("role") == "user":
            return _message_text(message.get("content"))
    return ""


def _last_marker(messages: Iterable[Any]) -> str | None:
    """The text of the latest `[Phase: ...]` marker line the agent sent, if any."""
    found = None
    for message in messages:
        if isinstance(message, Mapping) and message.get("role") == "user":
            match = _MARKER.match(_message_text(message.get("content")))
            if match is not None:
                found = match.group(1).strip()
    return found


def _estimate_tokens(text: str) -> int:
    return max(1, len(text) // 4)


class ReplayModel:
    """The script plus the state of every conversation and the requests received."""

    def __init__(self, script: ScriptSource, actions: Mapping[str, ScriptAction] | None = None) -> None:
        self._actions = dict(actions or {})
        self.script = self._checked(load_script(script))
        self._lock = threading.Lock()
        self._cursors: dict[str, int] = {}
        self._requests: list[RecordedRequest] = []

    @property
    def requests(self) -> list[RecordedRequest]:
        with self._lock:
            return list(self._requests)

    def reset(self) -> None:
        """Forget every conversation and recorded request."""
        with self._lock:
            self._cursors.clear()
            self._requests.clear()

    def load(self, script: ScriptSource) -> None:
        """Play `script` from now on, from a clean state (one server, many scenarios)."""
        loaded = self._checked(load_script(script))
        with self._lock:
            self.script = loaded
            self._cursors.clear()
            self._requests.clear()

    def take_step(
        self, path: str, body: dict[str, Any], messages: list[Any], headers: Mapping[str, str] | None = None
    ) -> tuple[str, int, ReplayStep]:
        """Record the request and advance its conversation: (conversation id, index, step)."""
        first = _first_user_message(messages)
        conversation = hashlib.sha1(first.encode("utf-8", "surrogatepass")).hexdigest()[:12]
        replies = self.script.replies_for(first)
        marker = _last_marker(messages) if self.script.phases else None
        key = self.script.phase_key(marker) if marker is not None else None
        phase_replies = dict(self.script.phases).get(key, ()) if key is not None else ()
        with self._lock:
            recorded = RecordedRequest(path, body, conversation, {k.lower(): v for k, v in (headers or {}).items()})
            self._requests.append(recorded)
            # Call ids are numbered by request, unique in the conversation whatever the phase.
            number = sum(1 for r in self._requests if r.conversation == conversation) - 1
            cursor = f"{conversation}:{key}"
            index = self._cursors.get(cursor, 0)
            if key is not None and index < len(phase_replies):
                self._cursors[cursor] = index + 1
                step: ReplayStep | None = phase_replies[index]
            else:
                step = None
                index = self._cursors.get(conversation, 0)
                self._cursors[conversation] = index + 1
        if step is None:
            step = replies[index] if index < len(replies) else ReplayStep(kind="done", comment=EXHAUSTED_COMMENT)
        if self.script.phases:
            index = number
        for name, args in step.before:
            self._actions[name](args)
        return conversation, index, step

    def _checked(self, script: ReplayScript) -> ReplayScript:
        """Every `before` action of `script` must be registered: fail at load, not mid-run."""
        steps = [
            *script.replies,
            *(step for c in script.conversations for step in c.replies),
            *(step for _, replies in script.phases for step in replies),
        ]
        missing = sorted({name for step in steps for name, _ in step.before} - self._actions.keys())
        if missing:
            raise ValueError(f"replay script: unregistered before action(s) {', '.join(missing)}")
        return script

    @staticmethod
    def render(step: ReplayStep, offered: list[str], call_prefix: str) -> _Rendered:
        """The reply for a request that offered the functions `offered` (empty: JSON text)."""
        if step.kind == "text":
            calls = tuple(
                _Call(f"{call_prefix}_{i}", call.name, call.arguments) for i, call in enumerate(step.tool_calls)
            )
            return _Rendered(step.text, calls)
        if step.kind in PHASE_FORMS:
            tool, tag = PHASE_FORMS[step.kind]
            body = {**step.args, **({"comment": step.comment} if step.comment else {})}
            name = match_offered_name(tool, offered) if offered else None
            if name is not None:
                return _Rendered("", (_Call(f"{call_prefix}_0", name, body),))
            obj = {"phase": tag, **body} if tag is not None else {"action_done": body}
            return _Rendered(json.dumps(obj, ensure_ascii=False), ())
        if step.kind == "tool":
            if not offered:
                command = {"tool": step.tool, "args": step.args}
                return _Rendered(json.dumps({"comment": step.comment, "command": command}, ensure_ascii=False), ())
            name = match_offered_name(step.tool, offered) or wire_candidates(step.tool)[0]
            return _Rendered(step.comment, (_Call(f"{call_prefix}_0", name, step.args),))
        # done
        if not offered:
            return _Rendered(json.dumps({"done": True, "comment": step.comment}, ensure_ascii=False), ())
        done_name = match_offered_name("done", offered)
        if done_name is None:  # tools offered but no `done` function: a final message ends the task
            return _Rendered(step.comment, ())
        return _Rendered("", (_Call(f"{call_prefix}_0", done_name, {"comment": step.comment}),))


# --- the HTTP app ---------------------------------------------------------------------


class JSONResponse(_StarletteJSONResponse):
    """JSON with non-ASCII escaped, as many servers send it: a lone surrogate the script
    holds ("\\ud800") goes out as valid JSON instead of failing to encode."""

    def render(self, content: Any) -> bytes:
        return json.dumps(content, allow_nan=False, separators=(",", ":")).encode("ascii")


def _offered_names(body: Mapping[str, Any]) -> list[str]:
    names = []
    for tool in body.get("tools") or []:
        function = tool.get("function") if isinstance(tool, Mapping) else None
        if isinstance(function, Mapping) and isinstance(function.get("name"), str):
            names.append(function["name"])
    return names


def _pieces(text: str, size: int = 16) -> list[str]:
    return [text[i : i + size] for i in range(0, len(text), size)]


def _usage(body: Mapping[str, Any], rendered: _Rendered) -> tuple[int, int]:
    prompt = _estimate_tokens(json.dumps(body.get("messages") or [], ensure_ascii=False))
    completion = _estimate_tokens(rendered.content + "".join(call.arguments_text() for call in rendered.calls))
    return prompt, completion


def _error_response(step: ReplayStep, openai_form: bool) -> Response:
    headers = {"Retry-After": f"{step.retry_after:g}"} if step.retry_after is not None else {}
    if openai_form:
        body: dict[str, Any] = {"error": {"message": step.message, "type": "replay_error", "code": step.status}}
    else:
        body = {"error": step.message}
    return JSONResponse(body, status_code=step.status, headers=headers)


async def _json_body(request: Request) -> dict[str, Any] | Response:
    try:
        body = await request.json()
    except (json.JSONDecodeError, UnicodeDecodeError):
        return JSONResponse({"error": {"message": "request body is not JSON"}}, status_code=400)
    if not isinstance(body, dict):
        return JSONResponse({"error": {"message": "request body must be a JSON object"}}, status_code=400)
    return body


def _openai_message(rendered: _Rendered) -> dict[str, Any]:
    message: dict[str, Any] = {"role": "assistant", "content": rendered.content or None}
    if rendered.calls:
        message["tool_calls"] = [
            {"id": call.id, "type": "function", "function": {"name": call.name, "arguments": call.arguments_text()}}
            for call in rendered.calls
        ]
    return message


async def _openai_stream(
    base: dict[str, Any], rendered: _Rendered, usage: dict[str, int] | None
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


def _ollama_message(rendered: _Rendered, content: str) -> dict[str, Any]:
    message: dict[str, Any] = {"role": "assistant", "content": content}
    if rendered.calls:
        message["tool_calls"] = [
            {"function": {"name": call.name, "arguments": call.arguments_object()}} for call in rendered.calls
        ]
    return message


async def _ndjson(lines: list[dict[str, Any]]) -> AsyncIterator[str]:
    for line in lines:
        yield json.dumps(line) + "\n"


def create_replay_app(model: ReplayModel) -> Starlette:
    """The ASGI app serving `model` on the OpenAI and Ollama paths."""

    async def delay() -> None:
        if model.script.latency_seconds > 0:
            await asyncio.sleep(model.script.latency_seconds)  # simulated model latency

    async def next_reply(request: Request, openai_form: bool) -> Response | tuple[dict[str, Any], str, int, _Rendered]:
        """The request's body and its conversation's next scripted reply, rendered for the
        tools it offers; or the response to send instead (bad body, scripted HTTP error)."""
        body = await _json_body(request)
        if isinstance(body, Response):
            return body
        conversation, index, step = model.take_step(request.url.path, body, body.get("messages") or [], request.headers)
        await delay()
        if step.kind == "status":
            return _error_response(step, openai_form=openai_form)
        if step.kind == "raw":
            media = "application/json" if openai_form or not body.get("stream", True) else "application/x-ndjson"
            return Response(step.raw, media_type=media)
        return body, conversation, index, model.render(step, _offered_names(body), f"call_{conversation[:8]}_{index}")

    async def chat_completions(request: Request) -> Response:
        reply = await next_reply(request, openai_form=True)
        if isinstance(reply, Response):
            return reply
        body, conversation, index, rendered = reply
        prompt, completion = _usage(body, rendered)
        usage = {"prompt_tokens": prompt, "completion_tokens": completion, "total_tokens": prompt + completion}
        base = {
            "id": f"chatcmpl-{conversation}-{index}",
            "object": "chat.completion",
            "created": int(time.time()),
            "model": str(body.get("model") or model.script.model),
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

    async def ollama_chat(request: Request) -> Response:
        reply = await next_reply(request, openai_form=False)
        if isinstance(reply, Response):
            return reply
        body, _, _, rendered = reply
        prompt, completion = _usage(body, rendered)
        base = {
            "model": str(body.get("model") or model.script.model),
            "created_at": datetime.now(timezone.utc).isoformat().replace("+00:00", "Z"),
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

    async def openai_models(request: Request) -> Response:
        entry = {"id": model.script.model, "object": "model", "created": 0, "owned_by": "replay"}
        return JSONResponse({"object": "list", "data": [entry]})

    async def ollama_show(request: Request) -> Response:
        """Ollama's model details: the context length `doctor` compares with num_ctx."""
        body = await request.json()
        name = str(body.get("model") or body.get("name") or "")
        if name not in (model.script.model, f"{model.script.model}:latest"):
            return JSONResponse({"error": f"model '{name}' not found"}, status_code=404)
        details = {"format": "gguf", "family": "replay", "parameter_size": "0B", "quantization_level": "none"}
        info = {"general.architecture": "replay", "replay.context_length": _REPLAY_CONTEXT_LENGTH}
        return JSONResponse({"modelfile": "", "parameters": "", "template": "", "details": details, "model_info": info})

    async def ollama_tags(request: Request) -> Response:
        details = {"format": "gguf", "family": "replay", "parameter_size": "0B", "quantization_level": "none"}
        entry = {
            "name": model.script.model,
            "model": model.script.model,
            "modified_at": "1970-01-01T00:00:00Z",
            "size": 0,
            "digest": hashlib.sha256(model.script.model.encode()).hexdigest(),
            "details": details,
        }
        return JSONResponse({"models": [entry]})

    async def ollama_version(request: Request) -> Response:
        return JSONResponse({"version": "0.0.0-replay"})

    async def recorded(request: Request) -> Response:
        items = [{"path": r.path, "conversation": r.conversation, "body": r.body} for r in model.requests]
        return JSONResponse({"requests": items})

    async def reset(request: Request) -> Response:
        model.reset()
        return JSONResponse({"reset": True})

    return Starlette(
        routes=[
            Route("/v1/chat/completions", chat_completions, methods=["POST"]),
            Route("/v1/models", openai_models, methods=["GET"]),
            Route("/api/chat", ollama_chat, methods=["POST"]),
            Route("/api/tags", ollama_tags, methods=["GET"]),
            Route("/api/show", ollama_show, methods=["POST"]),
            Route("/api/version", ollama_version, methods=["GET"]),
            Route("/_replay/requests", recorded, methods=["GET"]),
            Route("/_replay/reset", reset, methods=["POST"]),
        ]
    )


class ReplaySandbox(ServedApp):
    """The replay model server on a free loopback port: `with ReplaySandbox(script) as s: s.url`.

    `url` is the root URL, Ollama's endpoint.
    """

    def __init__(self, script: ScriptSource, actions: Mapping[str, ScriptAction] | None = None) -> None:
        self.model = ReplayModel(script, actions)
        super().__init__(create_replay_app(self.model))

    @property
    def openai_base_url(self) -> str:
        """Base URL for OpenAI-compatible clients (`llm.openai.base_url`, `llm.lmstudio.base_url`)."""
        return f"{self.url}/v1"

    @property
    def requests(self) -> list[RecordedRequest]:
        return self.model.requests

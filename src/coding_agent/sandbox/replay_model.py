"""The replay model server: a scripted stand-in for OpenAI, LM Studio and Ollama.

(The script's steps and loading are `replay_script.py`; its names are re-exported here.
How a step goes over the wire, in each provider's form, is `replay_wire.py`.)

Tests, benchmarks and `coding-agent demo` run the real provider clients against it over
real HTTP. One script drives every provider and both reply protocols: a scripted tool
call becomes a native tool call when the request offers tools, and the JSON-text reply
of seed 003 section 8 when it does not.

A conversation is identified by its first user message; each has its own cursor, so
concurrent runs on one script do not interfere. An exhausted script answers `done`.

`before` actions are what happens in the world while the model "thinks": the test
registers them by name (`ReplaySandbox(script, actions={"post_comment": fn})`), and each
is called with its arguments when the request for that reply arrives, before it is
answered (e.g. post a comment on the sandbox forge, unassign the bot, create a file).

The script's format (YAML, JSON or a dict) is described in `replay_script.py`.
"""

from __future__ import annotations

import asyncio
import hashlib
import re
import threading
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from coding_agent.sandbox.http_server import ServedApp
from coding_agent.sandbox.replay_script import (
    ConversationScript,
    RawToolCall,
    ReplayScript,
    ReplayStep,
    ScriptAction,
    ScriptSource,
    load_script,
)
from coding_agent.sandbox.replay_wire import (
    JSONResponse,
    Rendered,
    error_response,
    json_body,
    offered_names,
    ollama_reply,
    openai_reply,
    render_step,
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
    received_at: float = field(default_factory=time.monotonic, compare=False)  # for timelines


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
        step = self.script.filled(step, first)
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


# --- the HTTP app ---------------------------------------------------------------------


def create_replay_app(model: ReplayModel) -> Starlette:
    """The ASGI app serving `model` on the OpenAI and Ollama paths."""
    return Starlette(routes=[*_chat_routes(model), *_catalogue_routes(model), *_control_routes(model)])


def _chat_routes(model: ReplayModel) -> list[Route]:
    """The chat endpoints: each request takes its conversation's next scripted step."""

    async def delay() -> None:
        if model.script.latency_seconds > 0:
            await asyncio.sleep(model.script.latency_seconds)  # simulated model latency

    async def next_reply(request: Request, openai_form: bool) -> Response | tuple[dict[str, Any], str, int, Rendered]:
        """The request's body and its conversation's next scripted reply, rendered for the
        tools it offers; or the response to send instead (bad body, scripted HTTP error)."""
        body = await json_body(request)
        if isinstance(body, Response):
            return body
        conversation, index, step = model.take_step(request.url.path, body, body.get("messages") or [], request.headers)
        await delay()
        if step.kind == "status":
            return error_response(step, openai_form=openai_form)
        if step.kind == "raw":
            media = "application/json" if openai_form or not body.get("stream", True) else "application/x-ndjson"
            return Response(step.raw, media_type=media)
        return body, conversation, index, render_step(step, offered_names(body), f"call_{conversation[:8]}_{index}")

    async def chat_completions(request: Request) -> Response:
        reply = await next_reply(request, openai_form=True)
        if isinstance(reply, Response):
            return reply
        body, conversation, index, rendered = reply
        return openai_reply(body, conversation, index, rendered, model.script.model)

    async def ollama_chat(request: Request) -> Response:
        reply = await next_reply(request, openai_form=False)
        if isinstance(reply, Response):
            return reply
        body, _, _, rendered = reply
        return ollama_reply(body, rendered, model.script.model)

    return [
        Route("/v1/chat/completions", chat_completions, methods=["POST"]),
        Route("/api/chat", ollama_chat, methods=["POST"]),
    ]


def _catalogue_routes(model: ReplayModel) -> list[Route]:
    """What the server says of its one model, as OpenAI and Ollama list and describe models."""
    details = {"format": "gguf", "family": "replay", "parameter_size": "0B", "quantization_level": "none"}

    async def openai_models(request: Request) -> Response:
        entry = {"id": model.script.model, "object": "model", "created": 0, "owned_by": "replay"}
        return JSONResponse({"object": "list", "data": [entry]})

    async def ollama_show(request: Request) -> Response:
        """Ollama's model details: the context length `doctor` compares with num_ctx."""
        body = await request.json()
        asked = str(body.get("model") or body.get("name") or "")
        if asked not in (model.script.model, f"{model.script.model}:latest"):
            return JSONResponse({"error": f"model '{asked}' not found"}, status_code=404)
        info = {"general.architecture": "replay", "replay.context_length": _REPLAY_CONTEXT_LENGTH}
        return JSONResponse({"modelfile": "", "parameters": "", "template": "", "details": details, "model_info": info})

    async def ollama_tags(request: Request) -> Response:
        name = model.script.model
        entry = {
            "name": name,
            "model": name,
            "modified_at": "1970-01-01T00:00:00Z",
            "size": 0,
            "digest": hashlib.sha256(name.encode()).hexdigest(),
            "details": details,
        }
        return JSONResponse({"models": [entry]})

    async def ollama_version(request: Request) -> Response:
        return JSONResponse({"version": "0.0.0-replay"})

    return [
        Route("/v1/models", openai_models, methods=["GET"]),
        Route("/api/tags", ollama_tags, methods=["GET"]),
        Route("/api/show", ollama_show, methods=["POST"]),
        Route("/api/version", ollama_version, methods=["GET"]),
    ]


def _control_routes(model: ReplayModel) -> list[Route]:
    """The test's side: the requests recorded so far, and a reset between tests."""

    async def recorded(request: Request) -> Response:
        items = [{"path": r.path, "conversation": r.conversation, "body": r.body} for r in model.requests]
        return JSONResponse({"requests": items})

    async def reset(request: Request) -> Response:
        model.reset()
        return JSONResponse({"reset": True})

    return [
        Route("/_replay/requests", recorded, methods=["GET"]),
        Route("/_replay/reset", reset, methods=["POST"]),
    ]


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

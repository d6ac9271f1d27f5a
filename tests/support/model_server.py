"""The replay model as a particular model server answers (SPEC 5.1): test-only controls.

`ServerQuirks` wraps the replay model's app: `refuse_tools` answers every chat request
that offers `tools` with that server's own refusal (status and body as the server sends
them; the request is recorded in `refused`, not played from the script), and
`context_window` is what the server reports as the model's window (Ollama `/api/show`,
vLLM's `max_model_len` in `/v1/models`, LM Studio's `/api/v0/models`).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from starlette.responses import JSONResponse, Response
from starlette.types import Receive, Scope, Send

from coding_agent.sandbox.http_server import ServedApp
from coding_agent.sandbox.replay_model import RecordedRequest, ReplayModel, create_replay_app
from coding_agent.sandbox.replay_script import ScriptAction, ScriptSource

__all__ = ["Refusal", "REFUSALS", "ServerQuirks", "QuirkyReplay"]

_CHAT_PATHS = ("/v1/chat/completions", "/api/chat")


@dataclass(frozen=True)
class Refusal:
    """A server's answer to a request offering tools it cannot take: its status and body."""

    server: str
    status: int
    body: dict[str, Any]
    words: str  # the words the agent must log


# The servers' own texts, verbatim, with where each was seen:
REFUSALS: dict[str, Refusal] = {
    # vLLM without --enable-auto-tool-choice / --tool-call-parser: HTTP 400, as quoted in
    # vllm-project/vllm#9986 ('[Bug]: Deploying glm4 reported an error："auto" tool choice
    # requires --enable-auto-tool-choice and --tool-call-parser to be set') and
    # swiss-ai/model-launch#213; the body as vLLM's ErrorResponse (type BadRequestError).
    "vllm": Refusal(
        "vllm",
        400,
        {
            "error": {
                "message": '"auto" tool choice requires --enable-auto-tool-choice and --tool-call-parser to be set',
                "type": "BadRequestError",
                "param": None,
                "code": 400,
            }
        },
        '"auto" tool choice requires --enable-auto-tool-choice and --tool-call-parser to be set',
    ),
    # llama.cpp's llama-server without --jinja: HTTP 500, body from QwenLM/Qwen3.8#44 and
    # defilantech/LLMKube#126 ('500 tools param requires --jinja flag'); the text is
    # llama.cpp's `throw std::runtime_error("tools param requires --jinja flag")`.
    "llama.cpp": Refusal(
        "llama.cpp",
        500,
        {"error": {"code": 500, "message": "tools param requires --jinja flag", "type": "server_error"}},
        "tools param requires --jinja flag",
    ),
    # Ollama's /api/chat for a model without tools: HTTP 400, ollama/ollama#14795
    # ('Ollama API error 400: {"error":"registry.ollama.ai/library/Qwen3.5:0.8b does not
    # support tools"}'), ollama/ollama#11131, #13578.
    "ollama": Refusal(
        "ollama",
        400,
        {"error": "registry.ollama.ai/library/replay:latest does not support tools"},
        "registry.ollama.ai/library/replay:latest does not support tools",
    ),
    # Ollama's OpenAI-compatible /v1 (a `provider: openai` pointed at Ollama): HTTP 400,
    # ollama/ollama#6027 ('{"error":{"message":"stablelm2:latest does not support
    # tools","type":"api_error","param":null,"code":null}}') and ollama/ollama#5793.
    "ollama-v1": Refusal(
        "ollama-v1",
        400,
        {"error": {"message": "replay does not support tools", "type": "api_error", "param": None, "code": None}},
        "replay does not support tools",
    ),
    # LM Studio when the model's template cannot render the tools: HTTP 400,
    # lmstudio-ai/lmstudio-bug-tracker#2012 ("crashes with UndefinedValue jinja error when
    # any external client hits /v1/chat/completions with tools[] in the request").
    "lmstudio": Refusal(
        "lmstudio",
        400,
        {
            "error": 'Error rendering prompt with jinja template: "Cannot call something that is not a function: '
            'got UndefinedValue".\n\nThis is usually an issue with the model\'s prompt template. If you are using a '
            "popular model, you can try to search the model under lmstudio-community, which will have fixed prompt "
            "templates."
        },
        'Error rendering prompt with jinja template: "Cannot call something that is not a function: got UndefinedValue"',
    ),
}


@dataclass
class ServerQuirks:
    refuse_tools: Refusal | None = None
    context_window: int | None = None
    refused: list[RecordedRequest] = field(default_factory=list)


class _QuirkyApp:
    """The replay app behind the quirks (a plain ASGI wrapper: the body is read once and
    handed on to the replay app as it came)."""

    def __init__(self, model: ReplayModel, quirks: ServerQuirks) -> None:
        self._inner = create_replay_app(model)
        self._model = model
        self.quirks = quirks

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self._inner(scope, receive, send)
            return
        path = scope["path"]
        body = b""
        more = True
        while more:
            message = await receive()
            body += message.get("body", b"")
            more = message.get("more_body", False)
        response = self._answer(path, scope["method"], body)
        if response is not None:
            await response(scope, receive, send)
            return
        sent = False

        async def replay_receive() -> dict[str, Any]:
            nonlocal sent
            if not sent:
                sent = True
                return {"type": "http.request", "body": body, "more_body": False}
            return await receive()

        if path == "/v1/models" and self.quirks.context_window is not None:
            await self._models(scope, replay_receive, send)
            return
        await self._inner(scope, replay_receive, send)

    def _answer(self, path: str, method: str, raw: bytes) -> Response | None:
        quirks = self.quirks
        if method == "POST" and path in _CHAT_PATHS and quirks.refuse_tools is not None:
            try:
                body = json.loads(raw or b"{}")
            except json.JSONDecodeError:
                return None
            if isinstance(body, dict) and body.get("tools"):
                quirks.refused.append(RecordedRequest(path, body, "refused"))
                return JSONResponse(quirks.refuse_tools.body, status_code=quirks.refuse_tools.status)
        window = quirks.context_window
        if window is None:
            return None
        name = self._model.script.model
        if method == "POST" and path == "/api/show":
            info = {"general.architecture": "replay", "replay.context_length": window}
            return JSONResponse({"modelfile": "", "parameters": "", "template": "", "details": {}, "model_info": info})
        if method == "GET" and path == "/api/v0/models":
            entry = {"id": name, "object": "model", "type": "llm", "state": "loaded",
                     "max_context_length": window, "loaded_context_length": window}
            return JSONResponse({"object": "list", "data": [entry]})
        return None

    async def _models(self, scope: Scope, receive: Receive, send: Send) -> None:
        entry = {"id": self._model.script.model, "object": "model", "created": 0, "owned_by": "vllm",
                 "max_model_len": self.quirks.context_window}
        await JSONResponse({"object": "list", "data": [entry]})(scope, receive, send)


class QuirkyReplay(ServedApp):
    """The replay model server with `ServerQuirks`: `with QuirkyReplay(script, quirks) as s`."""

    def __init__(
        self, script: ScriptSource, quirks: ServerQuirks | None = None, actions: Mapping[str, ScriptAction] | None = None
    ) -> None:
        self.model = ReplayModel(script, actions)
        self.quirks = quirks or ServerQuirks()
        super().__init__(_QuirkyApp(self.model, self.quirks))

    @property
    def openai_base_url(self) -> str:
        return f"{self.url}/v1"

    @property
    def requests(self) -> list[RecordedRequest]:
        return self.model.requests

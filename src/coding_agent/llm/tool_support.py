"""`llm.function_calling: auto` (SPEC 5.1): native tool calls until the server refuses them.

Many self-hosted servers cannot take `tools` as started: vLLM without a tool parser,
llama.cpp's server without `--jinja`, an Ollama model whose template has no tools, an LM
Studio template that cannot render them. They say so in an error, each in its own words
(`REFUSALS`). A provider that gets one of those for a request that offered tools raises
`ToolsRefused` (never retried, even when it came as HTTP 500). Under `auto` the run then
goes on in JSON text (the runner's part: the system prompt and the policy), and this
module remembers the refusal for the rest of the process, keyed by provider, server and
model, so that later runs start in JSON text at once; one log line says why, in the
server's words. `true` and `false` are never switched.
"""

from __future__ import annotations

import logging

from coding_agent.config import LLMConfig, OllamaConfig
from coding_agent.llm.protocols import JsonTextProtocol, ReplyProtocol, ToolCallsProtocol

__all__ = [
    "REFUSALS",
    "ModelKey",
    "is_tools_refusal",
    "model_key",
    "refusal_of",
    "remember_refusal",
    "forget_refusals",
    "protocol_for",
]

log = logging.getLogger(__name__)

# The words servers answer a request offering `tools` with when they cannot take them
# (matched case-insensitively, inside whatever the server wraps them in). Sources of the
# verbatim texts are in tests/e2e/test_model_auto_protocol.py.
REFUSALS: tuple[str, ...] = (
    # vLLM started without tool calling (HTTP 400): '"auto" tool choice requires
    # --enable-auto-tool-choice and --tool-call-parser to be set'
    "--enable-auto-tool-choice",
    # llama.cpp's llama-server without --jinja (HTTP 500, type server_error)
    "tools param requires --jinja",
    # llama.cpp's server before it knew tools (HTTP 500)
    "unsupported param: tools",
    # Ollama (HTTP 400): "registry.ollama.ai/library/MODEL does not support tools" on
    # /api/chat, "MODEL does not support tools" on its OpenAI-compatible /v1
    "does not support tools",
    # LM Studio (HTTP 400): the model's chat template cannot render the tools
    "error rendering prompt with jinja template",
    # OpenRouter: no provider of the model takes tools
    "no endpoints found that support tool use",
)

ModelKey = tuple[str, str, str]  # (provider, server URL, model)

_refused: dict[ModelKey, str] = {}


def is_tools_refusal(server_words: str) -> bool:
    """Whether a server's error text (for a request that offered tools) is a refusal of tools."""
    lowered = server_words.lower()
    return any(words in lowered for words in REFUSALS)


def model_key(config: LLMConfig) -> ModelKey:
    section = config.active
    where = section.endpoint if isinstance(section, OllamaConfig) else section.base_url
    return (config.provider, where.rstrip("/"), section.model or "")


def refusal_of(key: ModelKey) -> str | None:
    """The server's words if it refused tools for this model earlier in this process."""
    return _refused.get(key)


def remember_refusal(key: ModelKey, server_words: str) -> None:
    """Note that the server refused tools for this model: JSON in text from now on. The
    first time only, one log line in the server's words."""
    if key in _refused:
        return
    _refused[key] = server_words
    provider, where, model = key
    log.warning(
        "llm %s %s refused native tool calls for model %s: %r; llm.function_calling: auto goes on "
        "with JSON in text for this model for the rest of the process",
        provider,
        where,
        model,
        server_words,
    )


def forget_refusals() -> None:
    """Forget every refusal (a fresh process's state; for tests running many in one)."""
    _refused.clear()


def protocol_for(config: LLMConfig) -> ReplyProtocol:
    """The protocol a new run starts with: `true` native, `false` JSON in text, `auto`
    native unless this model's server refused tools earlier in this process."""
    setting = config.function_calling
    if setting is False or (setting == "auto" and refusal_of(model_key(config)) is not None):
        return JsonTextProtocol()
    return ToolCallsProtocol()

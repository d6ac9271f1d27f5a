"""The model's context window as its server reports it (SPEC 5.1), and the one a run uses.

Servers say how long a prompt their model takes, each in its own place: Ollama in
`POST /api/show` (`num_ctx` in its parameters, else `<arch>.context_length` in its
model_info), vLLM as `max_model_len` on its `/v1/models` entry, LM Studio in its own
model list (`GET /api/v0/models`: `loaded_context_length`, else `max_context_length`).
`doctor` shows it and warns when `context_length` is larger; when `context_length` is not
set, runs use the reported window (the compression threshold, Ollama's `num_ctx`),
asked once per process and model, else `DEFAULT_CONTEXT_LENGTH`.
"""

from __future__ import annotations

import logging
from typing import Any

import httpx

from coding_agent.config import LLMConfig, OllamaConfig
from coding_agent.llm.tls import shared_tls_context
from coding_agent.llm.tool_support import ModelKey, model_key

__all__ = [
    "DEFAULT_CONTEXT_LENGTH",
    "reported_context_window",
    "resolve_context_length",
    "context_length_of",
    "ollama_window",
]

log = logging.getLogger(__name__)

DEFAULT_CONTEXT_LENGTH = 32768  # when neither the config nor the server says
_ASK_TIMEOUT_SECONDS = 8.0

_reported: dict[ModelKey, int] = {}


def ollama_window(shown: dict[str, Any]) -> int | None:
    """The window in an `/api/show` answer: its `num_ctx` parameter, else its model_info."""
    for line in str(shown.get("parameters") or "").splitlines():
        parts = line.split()
        if len(parts) == 2 and parts[0] == "num_ctx" and parts[1].isdigit():
            return int(parts[1])
    info = shown.get("model_info") or shown.get("modelinfo") or {}
    if isinstance(info, dict):
        for key, value in info.items():
            if str(key).endswith(".context_length") and isinstance(value, int) and value > 0:
                return value
    return None


def _positive(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else None


async def reported_context_window(config: LLMConfig, timeout: float = _ASK_TIMEOUT_SECONDS) -> int | None:
    """The window the server reports for the configured model; None when it reports none.

    Raises httpx's errors when the server cannot be reached (the caller says so)."""
    section = config.active
    model = section.model or ""
    async with httpx.AsyncClient(timeout=timeout, verify=shared_tls_context("httpx")) as client:
        if isinstance(section, OllamaConfig):
            response = await client.post(f"{section.endpoint.rstrip('/')}/api/show", json={"model": model})
            response.raise_for_status()
            shown = response.json()
            return ollama_window(shown) if isinstance(shown, dict) else None
        api_key = section.api_key.get_secret_value() if section.api_key is not None else ""
        headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        base = section.base_url.rstrip("/")
        if config.provider == "lmstudio":
            window = await _lmstudio_window(client, base, model, headers)
            if window is not None:
                return window
        response = await client.get(f"{base}/models", headers=headers)
        response.raise_for_status()
        for entry in _entries(response.json()):
            if entry.get("id") == model:
                return _positive(entry.get("max_model_len"))  # vLLM
    return None


async def _lmstudio_window(client: httpx.AsyncClient, base: str, model: str, headers: dict[str, str]) -> int | None:
    """LM Studio's own model list (`/api/v0/models` beside `/v1`): the loaded window first."""
    root = base.removesuffix("/v1")
    try:
        response = await client.get(f"{root}/api/v0/models", headers=headers)
    except httpx.HTTPError:
        return None
    if response.status_code != 200:
        return None
    for entry in _entries(response.json()):
        if entry.get("id") == model:
            return _positive(entry.get("loaded_context_length")) or _positive(entry.get("max_context_length"))
    return None


def _entries(listing: Any) -> list[dict[str, Any]]:
    data = listing.get("data") if isinstance(listing, dict) else None
    return [entry for entry in data if isinstance(entry, dict)] if isinstance(data, list) else []


async def resolve_context_length(config: LLMConfig) -> int:
    """The window a run uses: `context_length` when set; else the server's, asked once per
    process and model (a server that cannot be reached is asked again at the next run)."""
    configured = config.active.context_length
    if configured is not None:
        return configured
    key = model_key(config)
    if key not in _reported:
        try:
            window = await reported_context_window(config)
        except (httpx.HTTPError, ValueError) as error:
            log.warning(
                "llm %s: the model's context window could not be read (%s); using %d",
                key[1], type(error).__name__, DEFAULT_CONTEXT_LENGTH,
            )
            return DEFAULT_CONTEXT_LENGTH
        if window is None:
            log.info("llm %s: the server reports no context window for %s; using %d", key[1], key[2], DEFAULT_CONTEXT_LENGTH)
            _reported[key] = DEFAULT_CONTEXT_LENGTH  # not asked again: the answer would be the same
            return DEFAULT_CONTEXT_LENGTH
        log.info(
            "llm %s: context window of %s is %d (reported by the server; llm.%s.context_length is not set)",
            key[1], key[2], window, config.provider,
        )
        _reported[key] = window
    return _reported[key]


def context_length_of(config: LLMConfig) -> int:
    """The window in use now, without asking: `context_length`, else the one the server
    reported to `resolve_context_length`, else `DEFAULT_CONTEXT_LENGTH`."""
    configured = config.active.context_length
    if configured is not None:
        return configured
    return _reported.get(model_key(config), DEFAULT_CONTEXT_LENGTH)

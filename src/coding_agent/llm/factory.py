"""Build the LLM client the configuration asks for (SPEC 5).

Each provider's client is imported when it is chosen: the `openai` and `ollama` SDKs
cost a large share of the agent's start-up, and a process only ever talks to one.
"""

from __future__ import annotations

from coding_agent.config import LLMConfig, OllamaConfig, OpenAICompatibleConfig
from coding_agent.errors import ConfigError
from coding_agent.llm.base import LLMClient
from coding_agent.llm.context_window import context_length_of
from coding_agent.retry import RetryPolicy

__all__ = ["create_llm_client", "load_client_library"]

_OPENAI_HOST = "api.openai.com"


def create_llm_client(config: LLMConfig, retry: RetryPolicy) -> LLMClient:
    """A fresh conversation with the configured provider; one per run."""
    section = config.active
    model = section.model or ""
    if isinstance(section, OllamaConfig):
        from coding_agent.llm.ollama_client import OllamaClient

        return OllamaClient(
            model=model,
            endpoint=section.endpoint,
            retry=retry,
            context_length=context_length_of(config),
            max_tokens=section.max_tokens,
            temperature=section.temperature,
            timeout_seconds=section.timeout_seconds,
        )
    assert isinstance(section, OpenAICompatibleConfig)
    api_key = section.api_key.get_secret_value() if section.api_key is not None else None
    if not api_key and config.provider == "openai" and _OPENAI_HOST in section.base_url:
        raise ConfigError("llm.openai.api_key is not set: set OPENAI_API_KEY or llm.openai.api_key: ${VAR}")
    from coding_agent.llm.openai_client import OpenAICompatibleClient

    return OpenAICompatibleClient(
        model=model,
        base_url=section.base_url,
        api_key=api_key,
        retry=retry,
        max_tokens=section.max_tokens,
        temperature=section.temperature,
        timeout_seconds=section.timeout_seconds,
        provider=config.provider,
    )


def load_client_library(config: LLMConfig) -> None:
    """Import the configured provider's client and load what its first client would load
    lazily (the SDK's resources, the shared TLS context). Blocking, for a worker thread:
    done on the event loop's thread, it would stall every other run for about half a
    second (`agent/run_libraries.py`)."""
    if isinstance(config.active, OllamaConfig):
        from coding_agent.llm.ollama_client import load_library
    else:
        from coding_agent.llm.openai_client import load_library
    load_library()

"""The model sections: `llm` and its providers (openai, lmstudio, ollama).
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field, SecretStr, model_validator

from coding_agent.config.base import _Strict

__all__ = ["OpenAICompatibleConfig", "LMStudioConfig", "OllamaConfig", "ProviderName", "LLMConfig"]


class _ProviderCommon(_Strict):
    model: str | None = None
    # None: the window the server reports for the model (llm/context_window.py), else 32768
    context_length: int | None = Field(default=None, gt=0)
    max_tokens: int = Field(default=4096, gt=0)
    temperature: float = Field(default=0.2, ge=0)
    timeout_seconds: float = Field(default=300, gt=0)


class OpenAICompatibleConfig(_ProviderCommon):
    """`llm.openai` and `llm.lmstudio`: any server speaking OpenAI chat completions."""

    base_url: str = "https://api.openai.com/v1"
    api_key: SecretStr | None = None


class LMStudioConfig(OpenAICompatibleConfig):
    base_url: str = "http://localhost:1234/v1"


class OllamaConfig(_ProviderCommon):
    endpoint: str = "http://localhost:11434"


ProviderName = Literal["openai", "lmstudio", "ollama"]


class LLMConfig(_Strict):
    """The model: its provider, the provider's section, and how tools are offered (SPEC 5).

    `function_calling`: `true` offers every tool natively, `false` asks for JSON in the
    text, `auto` is native until the server refuses tools, then JSON in text for that
    model for the rest of the process (SPEC 5.1, `llm/tool_support.py`)."""

    provider: ProviderName
    function_calling: bool | Literal["auto"] = "auto"
    openai: OpenAICompatibleConfig | None = None
    lmstudio: LMStudioConfig | None = None
    ollama: OllamaConfig | None = None

    @model_validator(mode="after")
    def _provider_section(self) -> LLMConfig:
        section = getattr(self, self.provider)
        if section is None:
            raise ValueError(f"llm.provider is {self.provider!r} but there is no llm.{self.provider} section")
        if not section.model:
            raise ValueError(f"llm.{self.provider}.model is required")
        return self

    @property
    def active(self) -> OpenAICompatibleConfig | OllamaConfig:
        """The section of the chosen provider."""
        return getattr(self, self.provider)

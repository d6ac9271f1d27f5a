"""`llm/tool_support.py`: which server errors are refusals of tools, and the protocol a
run starts with under `llm.function_calling` (SPEC 5.1). The end-to-end fallback, with
each server's verbatim refusal, is tests/e2e/test_model_auto_protocol.py."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from coding_agent.config import LLMConfig
from coding_agent.llm.tool_support import forget_refusals, is_tools_refusal, model_key, protocol_for, remember_refusal
from tests.support.model_server import REFUSALS


@pytest.fixture(autouse=True)
def _fresh_process() -> Iterator[None]:
    forget_refusals()
    yield
    forget_refusals()


@pytest.mark.parametrize("server", sorted(REFUSALS))
def test_each_servers_words_are_a_refusal(server: str) -> None:
    assert is_tools_refusal(REFUSALS[server].words)


@pytest.mark.parametrize(
    "words",
    [
        "the request exceeds the available context size, try increasing it",  # llama.cpp: too long
        "This model's maximum context length is 8192 tokens. However, you requested 9000 tokens",  # vLLM
        "model 'qwen2.5-coder:14b' not found",  # Ollama: not pulled
        "Incorrect API key provided",
        "tool_choice must either be a named tool, 'auto', or 'none'",
    ],
)
def test_other_errors_are_not(words: str) -> None:
    assert not is_tools_refusal(words)


def _config(setting: object) -> LLMConfig:
    return LLMConfig.model_validate(
        {"provider": "openai", "function_calling": setting, "openai": {"base_url": "http://gpu:8000/v1/", "model": "m"}}
    )


def test_auto_is_the_default_and_starts_native_until_the_model_refused() -> None:
    config = LLMConfig.model_validate({"provider": "openai", "openai": {"model": "m"}})
    assert config.function_calling == "auto"
    assert protocol_for(_config("auto")).name == "tool_calls"
    remember_refusal(model_key(_config("auto")), "tools param requires --jinja flag")
    assert protocol_for(_config("auto")).name == "json_text", "the rest of the process, same server and model"
    other = LLMConfig.model_validate({"provider": "openai", "openai": {"base_url": "http://gpu:8000/v1", "model": "n"}})
    assert protocol_for(other).name == "tool_calls", "another model of the same server is asked afresh"


def test_true_and_false_keep_their_meaning() -> None:
    remember_refusal(model_key(_config(True)), "does not support tools")
    assert protocol_for(_config(True)).name == "tool_calls"
    assert protocol_for(_config("true")).name == "tool_calls"
    assert protocol_for(_config(False)).name == "json_text"


def test_a_bad_setting_names_the_key() -> None:
    with pytest.raises(ValueError, match="function_calling"):
        _config("sometimes")

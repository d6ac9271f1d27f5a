"""Each run's model client reuses the process's TLS context (issue 13 item 4).

Building a TLS context loads the system's CA certificates, about 0.1 CPU-s: a run
paid it before its first model request when every conversation built its own. The
contexts are found by walking the clients' objects, whatever the SDK calls them.
"""

from __future__ import annotations

import ssl
from typing import Any

import pytest

from coding_agent.llm.ollama_client import OllamaClient
from coding_agent.llm.openai_client import OpenAICompatibleClient
from coding_agent.retry import RetryPolicy


def _tls_contexts(root: object, depth: int = 8) -> set[int]:
    """ids of the SSLContext objects reachable from `root` through attributes, dicts and lists."""
    found: set[int] = set()
    seen: set[int] = set()

    def walk(item: Any, level: int) -> None:
        if id(item) in seen or level > depth or isinstance(item, (str, bytes, int, float, type)):
            return
        seen.add(id(item))
        if isinstance(item, ssl.SSLContext):
            found.add(id(item))
            return
        children: list[Any] = []
        if isinstance(item, dict):
            children = list(item.values())
        elif isinstance(item, (list, tuple, set)):
            children = list(item)
        elif hasattr(item, "__dict__"):
            children = list(vars(item).values())
        for child in children:
            walk(child, level + 1)

    walk(root, 0)
    return found


def _openai() -> OpenAICompatibleClient:
    return OpenAICompatibleClient(model="m", base_url="https://models.example/v1", api_key="k", retry=RetryPolicy())


def _ollama() -> OllamaClient:
    return OllamaClient(model="m", endpoint="http://models.example:11434", retry=RetryPolicy())


@pytest.mark.parametrize("make", [_openai, _ollama], ids=["openai", "ollama"])
def test_two_conversations_share_one_tls_context(make: Any) -> None:
    first, second = make(), make()
    contexts = _tls_contexts(first)
    assert contexts, "the walk found the client's TLS context"
    assert contexts == _tls_contexts(second)

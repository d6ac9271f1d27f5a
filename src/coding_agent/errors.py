"""The agent's own exception types.

Adapters (forges, LLM providers, MCP) translate their library's exceptions into these,
so that the loop and the retry policy decide on one vocabulary. Messages never carry a
token or a stack trace: they may end up in a comment on the issue.
"""

from __future__ import annotations

__all__ = [
    "AgentError",
    "ConfigError",
    "TransientError",
    "ForgeError",
    "LLMError",
    "ToolsRefused",
    "ToolError",
    "QueueUnavailable",
]


class AgentError(Exception):
    """Base of every error the agent raises on purpose."""


class ConfigError(AgentError):
    """The configuration is unusable; the message names the key and the problem."""


class TransientError(AgentError):
    """A failure worth retrying: HTTP 5xx, 429, a timeout, a dropped connection.

    `retry_after` is the server's hint in seconds (Retry-After, or the time until a
    GitHub rate limit resets), when it gave one. `maybe_applied` is False when the server
    certainly did nothing (a rate limit): a write is then retried without checking first.
    """

    def __init__(self, message: str, retry_after: float | None = None, *, maybe_applied: bool = True) -> None:
        super().__init__(message)
        self.retry_after = retry_after
        self.maybe_applied = maybe_applied


class QueueUnavailable(TransientError):
    """The queue's broker cannot be reached now (RabbitMQ restarting, a network blip):
    nothing was enqueued; the next producer cycle offers the task again."""


class ForgeError(AgentError):
    """A forge request failed for good (4xx other than 429, or retries used up)."""


class LLMError(AgentError):
    """The model server failed for good."""


class ToolsRefused(LLMError):
    """The model server refused a request because it offered native tools (vLLM without
    a tool parser, llama.cpp without `--jinja`, an Ollama model without tool support).

    `server_words` is the server's own error text; `llm.function_calling: auto` answers it
    by going on in JSON text (`llm/tool_support.py`), `true` fails the run with it."""

    def __init__(self, message: str, server_words: str) -> None:
        super().__init__(message)
        self.server_words = server_words


class ToolError(AgentError):
    """An MCP server could not be started or reached (not a tool that reported an error)."""

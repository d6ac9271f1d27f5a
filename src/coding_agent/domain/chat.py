"""The two values a prompt is made of besides text: a chat message and a tool as offered.

Here, below `prompts` (which renders tool lists and summarises messages) and `llm`
(which sends them), so that the prompt renderers need nothing from the model clients.
`llm.types` re-exports both.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

__all__ = ["Message", "ToolSpec"]

# One chat message in OpenAI form: {"role": ..., "content": ..., "tool_calls": [...], ...}.
# Providers translate it to their own wire format; context storage writes it as JSON.
Message = dict[str, Any]


@dataclass(frozen=True)
class ToolSpec:
    """An MCP tool as offered to the model. `name` is the real `server/tool` name."""

    name: str
    description: str
    input_schema: dict[str, Any]

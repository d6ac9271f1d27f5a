"""What a tool call returns to the loop."""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["ToolResult"]


@dataclass(frozen=True)
class ToolResult:
    """The text output of one MCP tool call, already capped at `tools.max_output_chars`.

    `is_error` is the server's own error flag, or a timeout / unknown tool reported by the
    hub; either way the model sees the text and can change course. `cut_chars` says how
    much output the cap removed (0 when none).
    """

    name: str
    text: str
    is_error: bool = False
    duration_seconds: float = 0.0
    output_chars: int = 0
    cut_chars: int = 0

"""A tiny MCP server for the ToolHub tests: slow, failing, large and non-text tool results.

Run as a script (`python slow_mcp_server.py`); it is not a test module.
"""

from __future__ import annotations

import anyio
from mcp.server.fastmcp import FastMCP, Image

__all__ = ["server"]

server = FastMCP("testing", log_level="WARNING")


@server.tool(structured_output=False)
async def echo(text: str) -> str:
    """Return the text unchanged."""
    return text


@server.tool(structured_output=False)
async def slow(seconds: float) -> str:
    """Sleep, then answer: for call timeouts."""
    await anyio.sleep(seconds)
    return "finally"


@server.tool(structured_output=False)
async def big(chars: int) -> str:
    """Return `chars` characters: the first half 'a', the second half 'z'."""
    half = chars // 2
    return "a" * half + "z" * (chars - half)


@server.tool(structured_output=False)
async def fail(reason: str) -> str:
    """Always fail with the given reason."""
    raise RuntimeError(reason)


@server.tool(structured_output=False)
async def picture() -> Image:
    """Return a (tiny, fake) PNG image: non-text content."""
    return Image(data=b"\x89PNG fake", format="png")


if __name__ == "__main__":
    server.run("stdio")

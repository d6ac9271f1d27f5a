"""A tool call through the MCP hub against a bare `mcp` client session (target: hub within 2x).

For each server (the built-in workspace server; the npm `mcp-server-filesystem` when it
is on PATH) the script opens both at once, on the same server command and workspace:

- `ToolHub`, as a run uses it (one persistent stdio session per server);
- a bare `mcp` `ClientSession` over `stdio_client`,

and calls the same tool with the same arguments (read a small file), alternating hub and
bare calls so that both see the same machine noise. It reports median and p95 per call
and the hub/bare ratio of the medians. It also times a process start per call (a fresh
`stdio_client` session per call: spawn, initialize, call, stop), the cost the hub's
persistent sessions avoid.

Run: `python benchmarks/bench_mcp_hub.py [--calls 300] [--fresh 5]`
"""

from __future__ import annotations

import argparse
import asyncio
import os
import shutil
import tempfile
import time
from collections.abc import Awaitable, Callable
from contextlib import AsyncExitStack
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TextIO

from _common import emit, summary_ms
from mcp import ClientSession, StdioServerParameters
from mcp.client.stdio import stdio_client

from coding_agent.config import MCPServerConfig, ToolsConfig, builtin_workspace_server
from coding_agent.tools.hub import ToolHub

TARGET_RATIO = 2.0
WARMUP_CALLS = 20
FILE_NAME = "notes.txt"
FILE_TEXT = "".join(f"line {n}: the quick brown fox jumps over the lazy dog\n" for n in range(1, 21))
FILESYSTEM_COMMAND = "mcp-server-filesystem"


@dataclass(frozen=True)
class Case:
    """One server and the one call made through both clients."""

    name: str
    config: MCPServerConfig
    tool: str
    args: dict[str, Any]


def _cases(workspace: Path) -> tuple[list[Case], list[str]]:
    """The servers to measure, and notes on the ones left out."""
    cases = [Case("builtin_workspace", builtin_workspace_server(), "view", {"path": FILE_NAME})]
    notes = []
    if shutil.which(FILESYSTEM_COMMAND):
        config = MCPServerConfig(mcp_server_name="filesystem", command=[FILESYSTEM_COMMAND, "{workspace}"])
        cases.append(Case("npm_server_filesystem", config, "read_text_file", {"path": str(workspace / FILE_NAME)}))
    else:
        notes.append(f"{FILESYSTEM_COMMAND} is not on PATH (npm i -g @modelcontextprotocol/server-filesystem): skipped")
    return cases, notes


def _parameters(case: Case, workspace: Path) -> StdioServerParameters:
    """The bare client's view of the same server: `{workspace}` filled in as the hub does."""
    argv = [item.replace("{workspace}", str(workspace)) for item in case.config.command]
    return StdioServerParameters(command=argv[0], args=argv[1:], env=dict(case.config.env) or None, cwd=workspace)


async def _timed(call: Callable[[], Awaitable[Any]]) -> float:
    started = time.perf_counter()
    await call()
    return time.perf_counter() - started


async def _bare_session(stack: AsyncExitStack, parameters: StdioServerParameters, errlog: TextIO) -> ClientSession:
    read, write = await stack.enter_async_context(stdio_client(parameters, errlog=errlog))
    session = await stack.enter_async_context(ClientSession(read, write))
    await session.initialize()
    return session


async def measure(case: Case, workspace: Path, calls: int, fresh: int, errlog: TextIO) -> dict[str, Any]:
    parameters = _parameters(case, workspace)
    full_name = f"{case.config.mcp_server_name}/{case.tool}"
    hub_times: list[float] = []
    bare_times: list[float] = []
    async with ToolHub([case.config], ToolsConfig(), workspace) as hub, AsyncExitStack() as stack:
        bare = await _bare_session(stack, parameters, errlog)

        async def through_hub() -> None:
            result = await hub.call(full_name, case.args)
            if result.is_error or "quick brown fox" not in result.text:
                raise SystemExit(f"{case.name}: the hub's call failed: {result.text[:200]}")

        async def through_bare() -> None:
            result = await bare.call_tool(case.tool, case.args)
            if result.isError:
                raise SystemExit(f"{case.name}: the bare client's call failed: {result.content}")

        for _ in range(WARMUP_CALLS):
            await through_hub()
            await through_bare()
        for index in range(calls):
            # Alternate which goes first, so neither always follows the other's call.
            first, second = (through_hub, through_bare) if index % 2 == 0 else (through_bare, through_hub)
            first_time, second_time = await _timed(first), await _timed(second)
            hub_time, bare_time = (first_time, second_time) if index % 2 == 0 else (second_time, first_time)
            hub_times.append(hub_time)
            bare_times.append(bare_time)

    async def fresh_session_call() -> None:
        async with AsyncExitStack() as stack:
            session = await _bare_session(stack, parameters, errlog)
            await session.call_tool(case.tool, case.args)

    fresh_times = [await _timed(fresh_session_call) for _ in range(fresh)]
    hub_summary, bare_summary = summary_ms(hub_times), summary_ms(bare_times)
    ratio = hub_summary["median_ms"] / bare_summary["median_ms"]
    return {
        "server": case.name,
        "command": case.config.command,
        "tool": case.tool,
        "hub": hub_summary,
        "bare_client": bare_summary,
        "hub_over_bare_median_ratio": round(ratio, 3),
        "hub_over_bare_p95_ratio": round(hub_summary["p95_ms"] / bare_summary["p95_ms"], 3),
        "met": ratio < TARGET_RATIO,
        "process_start_per_call": summary_ms(fresh_times),
        "process_start_over_hub_median_ratio": round(summary_ms(fresh_times)["median_ms"] / hub_summary["median_ms"], 1),
    }


async def run(calls: int, fresh: int) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="bench-mcp-") as tmp, open(os.devnull, "w") as errlog:
        workspace = Path(tmp).resolve()
        (workspace / FILE_NAME).write_text(FILE_TEXT)
        cases, notes = _cases(workspace)
        servers = [await measure(case, workspace, calls, fresh, errlog) for case in cases]
    return {
        "benchmark": "mcp_hub",
        "what": "one tool call (read a small file) through ToolHub.call vs a bare mcp ClientSession on the same server",
        "target": f"hub median < {TARGET_RATIO}x bare median",
        "met": all(server["met"] for server in servers),
        "calls_per_client": calls,
        "servers": servers,
        "notes": notes,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=300, help="measured calls per client and server (default 300)")
    parser.add_argument("--fresh", type=int, default=5, help="fresh-process calls per server (default 5)")
    arguments = parser.parse_args()
    emit(asyncio.run(run(arguments.calls, arguments.fresh)))


if __name__ == "__main__":
    main()

"""The cost of one `run` of `true` through the hardened sandbox (target: under 30 ms median).

`run_command` is what the workspace server's `run` tool calls: bwrap with its namespaces,
the dropped capabilities and the minimal filesystem, a shell, `true`, then the kill of
the command's process group. Measured in-process (no MCP round trip: that cost is
`bench_mcp_hub.py`'s), on a throwaway workspace, after one warm-up call.

Run: `python benchmarks/bench_sandbox_run.py [--calls 50]`
"""

from __future__ import annotations

import argparse
import asyncio
import resource
import tempfile
from pathlib import Path

import _common

from coding_agent.tools.sandbox import run_command

TARGET_MS = 30.0


def _children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


async def _measure(root: Path, calls: int) -> tuple[list[float], list[float]]:
    """Wall time of each call, and the CPU time its processes used (less sensitive to load)."""
    await run_command("true", root, 30, "bwrap")
    durations, cpu = [], []
    for _ in range(calls):
        before = _children_cpu()
        result = await run_command("true", root, 30, "bwrap")
        cpu.append(_children_cpu() - before)
        if result.exit_code != 0 or not result.sandboxed:
            raise SystemExit(f"`true` did not succeed in the sandbox: {result}")
        durations.append(result.duration_seconds)
    return durations, cpu


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=50)
    options = parser.parse_args()
    with tempfile.TemporaryDirectory() as directory:
        durations, cpu = asyncio.run(_measure(Path(directory).resolve(), options.calls))
    figures = _common.summary_ms(durations)
    _common.emit(
        {
            "benchmark": "sandbox_run_true",
            "run_true": figures,
            "cpu_of_the_sandboxed_processes": _common.summary_ms(cpu),
            "target": f"median < {TARGET_MS:g} ms",
            "met": figures["median_ms"] < TARGET_MS,
        }
    )


if __name__ == "__main__":
    main()

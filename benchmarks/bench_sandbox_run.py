"""The cost of one `run` of `true` through the hardened sandbox (target: under 30 ms median).

`run_command` is what the workspace server's `run` tool calls: bwrap with its namespaces,
the dropped capabilities and the minimal filesystem, a shell, `true`, then the kill of
the command's process group. Measured in-process (no MCP round trip: that cost is
`bench_mcp_hub.py`'s), on a throwaway workspace, after one warm-up call.

`--egress` measures the same with the run's egress proxy on (SPEC 7.1: the proxy's socket
bound in, the forwarder inside, the proxy variables set), as every `run` of an agent run
has it, also with empty allow-lists (refusals are recorded for the PR body).

Run: `python benchmarks/bench_sandbox_run.py [--calls 50] [--egress]`
"""

from __future__ import annotations

import argparse
import asyncio
import resource
import tempfile
from pathlib import Path

import _common

from coding_agent.tools.egress_proxy import EgressProxy
from coding_agent.tools.egress_sandbox import EgressSandbox
from coding_agent.tools.sandbox import run_command

TARGET_MS = 30.0


def _children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


async def _measure(root: Path, calls: int, egress: bool) -> tuple[list[float], list[float]]:
    """Wall time of each call, and the CPU time its processes used (less sensitive to load)."""
    if not egress:
        return await _calls(root, calls, None)
    async with EgressProxy([], []) as proxy:
        proxy.phase = "run"
        return await _calls(root, calls, EgressSandbox(proxy.socket_path))


async def _calls(root: Path, calls: int, egress: EgressSandbox | None) -> tuple[list[float], list[float]]:
    await run_command("true", root, 30, "bwrap", egress=egress)
    durations, cpu = [], []
    for _ in range(calls):
        before = _children_cpu()
        result = await run_command("true", root, 30, "bwrap", egress=egress)
        cpu.append(_children_cpu() - before)
        if result.exit_code != 0 or not result.sandboxed:
            raise SystemExit(f"`true` did not succeed in the sandbox: {result}")
        durations.append(result.duration_seconds)
    return durations, cpu


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=50)
    parser.add_argument("--egress", action="store_true", help="with the egress proxy and its forwarder")
    options = parser.parse_args()
    with tempfile.TemporaryDirectory() as directory:
        durations, cpu = asyncio.run(_measure(Path(directory).resolve(), options.calls, options.egress))
    figures = _common.summary_ms(durations)
    _common.emit(
        {
            "benchmark": "sandbox_run_true",
            "egress_proxy": options.egress,
            "run_true": figures,
            "cpu_of_the_sandboxed_processes": _common.summary_ms(cpu),
            "target": f"median < {TARGET_MS:g} ms",
            "met": figures["median_ms"] < TARGET_MS,
        }
    )


if __name__ == "__main__":
    main()

"""Start-up cost: what a process pays to import what it needs before its first useful step.

Every CLI command and every agent process imports the config; a `run --once` from cron
mostly finds nothing to do. The heavy libraries (sqlalchemy, alembic, the LLM SDKs, the
MCP SDK, the forge clients) are imported where they are used, so that `coding-agent
--help`, a config check or a poll without work does not pay for them; a run loads the
model's SDK and the MCP SDK as it starts (`agent/run_libraries.py`), and a store already
at the newest revision opens without Alembic (`store/schema.py`'s `HEAD`).

Each probe runs in a fresh interpreter (`--runs` times, after one uncounted run that
warms the OS's file cache): its CPU time and wall time until the statement has run, and
which heavy libraries `sys.modules` then holds. Target: no probe loads a library it is
meant to leave out (config, CLI and the LLM factory: all of them; a poll: the SDKs and
Alembic; opening a migrated store: Alembic and Mako).

Run: `python benchmarks/bench_startup.py [--runs 5]`
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

from _common import emit

HEAVY = ("sqlalchemy", "alembic", "mako", "openai", "ollama", "mcp", "githubkit", "gitlab")

_PROBE = """
import json, resource, sys, time
started = time.perf_counter()
{statement}
wall = time.perf_counter() - started
usage = resource.getrusage(resource.RUSAGE_SELF)
print(json.dumps({{"wall_s": wall, "cpu_s": usage.ru_utime + usage.ru_stime,
                  "loaded": sorted({{name.split(".")[0] for name in sys.modules}})}}))
"""


def _probes(state_db: Path) -> list[tuple[str, str, tuple[str, ...]]]:
    """(name, statement, the heavy libraries it must leave out)."""
    open_store = f"from coding_agent.store.state import StateStore\nStateStore('sqlite:///{state_db}').runs.all()"
    return [
        ("import_config", "import coding_agent.config", HEAVY),
        ("import_cli", "import coding_agent.cli", HEAVY),
        # A poll opens the store (sqlalchemy); the SDKs wait for a run.
        ("poll_modules", "import coding_agent.cli.serving, coding_agent.runtime.service, coding_agent.cli.checks",
         ("alembic", "mako", "openai", "ollama", "mcp")),
        ("llm_factory", "import coding_agent.llm.factory", HEAVY),
        ("open_migrated_store", open_store, ("alembic", "mako")),
        ("run_libraries", "import coding_agent.llm.openai_client, coding_agent.tools.hub", ()),
    ]


def _once(statement: str) -> dict[str, Any]:
    completed = subprocess.run(
        [sys.executable, "-c", _PROBE.format(statement=statement)], capture_output=True, text=True, check=True
    )
    return json.loads(completed.stdout.strip().splitlines()[-1])


def measure(name: str, statement: str, left_out: tuple[str, ...], runs: int) -> dict[str, Any]:
    _once(statement)  # warms the file cache (and migrates the store the first time)
    samples = [_once(statement) for _ in range(runs)]
    loaded = set(samples[-1]["loaded"])
    return {
        "probe": name,
        "statement": statement.splitlines()[-1] if "\n" in statement else statement,
        "cpu_s_median": round(statistics.median(sample["cpu_s"] for sample in samples), 3),
        "wall_s_median": round(statistics.median(sample["wall_s"] for sample in samples), 3),
        "heavy_libraries_loaded": sorted(loaded & set(HEAVY)),
        "must_leave_out": list(left_out),
        "met": not loaded & set(left_out),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5, help="fresh interpreters per probe (default 5)")
    arguments = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="bench-startup-") as directory:
        probes = [measure(*probe, max(1, arguments.runs)) for probe in _probes(Path(directory) / "state.db")]
    emit(
        {
            "benchmark": "startup",
            "what": "CPU and wall time of an import in a fresh interpreter, and the heavy libraries it loads",
            "target": "no probe loads a library it must leave out",
            "met": all(probe["met"] for probe in probes),
            "probes": probes,
        }
    )


if __name__ == "__main__":
    main()

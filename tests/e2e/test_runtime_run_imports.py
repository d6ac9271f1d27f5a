"""What a run imports once per process, the model's SDK and the MCP SDK (about 0.8 CPU-s
here), is imported in a worker thread, never on the event loop's thread: there it would
stop every other run's steps, every lease heartbeat and every webhook of the process for
that long. `serve` loads it as it starts, before any task is found; `run --once` as its
first run starts (a poll from cron that finds nothing loads nothing, see
benchmarks/bench_startup.py).

Observed, not timed: a `sitecustomize` on the child's path records on which thread each
of these packages is first imported (an audit hook), and the real CLI runs as a user runs
it.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
from pathlib import Path

from coding_agent.sandbox.replay_model import ReplaySandbox
from tests.support.waiting import wait_for

from ._steering import spawn_cli
from .conftest import HELLO_SCRIPT, GitHubForge, llm_section, write_config

WATCHED = ("openai", "mcp")

_SITECUSTOMIZE = f"""
import json, os, sys, threading

_RECORD = os.environ["IMPORT_RECORD"]


def _record_first_imports(event, args):
    # An import statement raises "import" for each module it loads (importlib.import_module
    # does not for the one it is given, but does for what that one imports).
    if event == "import" and args[0].split(".")[0] in {WATCHED!r}:
        with open(_RECORD, "a", encoding="utf-8") as handle:
            handle.write(json.dumps({{"module": args[0].split(".")[0], "thread": threading.current_thread().name}}) + "\\n")


sys.addaudithook(_record_first_imports)
"""


def _recorded(record: Path) -> dict[str, set[str]]:
    """{package: the threads its modules were imported on}, as the child recorded them."""
    if not record.exists():
        return {}
    threads: dict[str, set[str]] = {}
    for line in record.read_text(encoding="utf-8").split("\n")[:-1]:  # not a line being written
        entry = json.loads(line)
        threads.setdefault(entry["module"], set()).add(entry["thread"])
    return threads


def _cli(config: Path, *args: str) -> subprocess.Popen[str]:
    """The CLI with the recording `sitecustomize` first on its path."""
    directory = config.parent
    hooks = directory / "hooks"
    hooks.mkdir()
    (hooks / "sitecustomize.py").write_text(_SITECUSTOMIZE, encoding="utf-8")
    path = os.pathsep.join([str(hooks), *filter(None, [os.environ.get("PYTHONPATH")])])
    return spawn_cli(config, *args, env={"IMPORT_RECORD": str(directory / "imports.jsonl"), "PYTHONPATH": path})


def test_run_once_imports_what_its_first_run_needs_off_the_event_loop(github_forge: GitHubForge, tmp_path: Path) -> None:
    with ReplaySandbox(HELLO_SCRIPT) as model:
        number = github_forge.open_task("issue", "Say hello", "Please add hello.txt")
        setup = write_config(tmp_path, [github_forge], llm_section(model))
        process = _cli(setup.config_path, "run", "--once")
        out, err = process.communicate(timeout=180)
    assert process.returncode == 0, err[-3000:]
    assert "coding agent done" in github_forge.labels("issue", number), out
    imported = _recorded(tmp_path / "imports.jsonl")
    assert sorted(imported) == sorted(WATCHED), imported
    assert all("MainThread" not in threads for threads in imported.values()), imported


def test_serve_imports_what_runs_need_as_it_starts_off_the_event_loop(github_forge: GitHubForge, tmp_path: Path) -> None:
    with ReplaySandbox(HELLO_SCRIPT) as model:
        setup = write_config(
            tmp_path,
            [github_forge],
            llm_section(model),
            scheduling={"interval_seconds": 3600},
            dashboard={"enabled": False},
        )
        process = _cli(setup.config_path, "serve")
        try:

            def loaded_or_ended() -> bool:
                return process.poll() is not None or sorted(_recorded(tmp_path / "imports.jsonl")) == sorted(WATCHED)

            wait_for(loaded_or_ended, 120, f"serve to import {WATCHED} before any task comes")
            assert process.poll() is None, process.communicate()[1][-3000:]
        finally:
            process.send_signal(signal.SIGTERM)
            _, err = process.communicate(timeout=60)
    assert process.returncode == 0, err[-3000:]
    imported = _recorded(tmp_path / "imports.jsonl")
    assert all("MainThread" not in threads for threads in imported.values()), imported

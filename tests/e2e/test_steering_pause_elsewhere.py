"""Pause on one machine, resume on another (SPEC 8.3; issue 13 item 7).

The pause commits the workspace as a WIP commit and pushes it to the task's branch; the
saved state names the branch and the commit, no path of the machine. Here "machine A"
and "machine B" are two workspace roots sharing the contexts directory and the state
store (as workers on two hosts share them); B never sees A's clone, which stays on A
until A's next cleanup sweeps it (the run ended on B). The pause comes after a tool result, before it is sent: B's first
request must carry that result (the tool is not run again), B's clone must hold A's
edit, and the PR/MR opened at done must hold it, with the WIP commit under the final one.
"""

from __future__ import annotations

import json
import threading
from pathlib import Path
from typing import Any

from coding_agent.sandbox.replay_model import ReplaySandbox

from ._forge_git import branch_file, branch_log, change_heads, task_branch
from ._steering import run_cycle, steering_config, wait_for
from .conftest import ForgeUnderTest, load_for_service, run_cli

# The edit, then a gate: the test raises the pause signal while the command runs, so the
# run pauses at the checkpoint right after this tool result.
GATE = (
    "printf 'edited on machine A\\n' > notes.txt; touch .gate-waiting; "
    "while [ ! -f .gate-open ]; do sleep 0.02; done; rm -f .gate-waiting .gate-open; echo notes.txt written"
)
SCRIPT: dict[str, Any] = {
    "replies": [
        {"tool": "workspace/run", "args": {"command": GATE}, "comment": "Writing notes.txt."},
        {
            "tool": "workspace/create",
            "args": {"path": "more.txt", "content": "more\n"},
            "comment": "Writing more.txt.",
            "before": {"look": {}},
        },
        {"done": "Wrote notes.txt and more.txt."},
    ]
}


def _pause_during_the_gate(root: Path, signal_file: Path) -> threading.Thread:
    def pause() -> None:
        [waiting] = wait_for(lambda: list(root.glob("*/.gate-waiting")), 120, "the gated command to run")
        signal_file.parent.mkdir(parents=True, exist_ok=True)
        signal_file.touch()
        (waiting.parent / ".gate-open").touch()

    thread = threading.Thread(target=pause, daemon=True)
    thread.start()
    return thread


def _saved_files(directory: Path) -> dict[str, bytes]:
    """Every file the run's saved state lives in: the contexts and the state store."""
    files = {str(path): path.read_bytes() for path in (directory / "contexts").rglob("*") if path.is_file()}
    files.update({str(path): path.read_bytes() for path in directory.glob("state.db*")})
    return files


def test_a_run_paused_on_one_machine_resumes_on_another(forge: ForgeUnderTest, tmp_path: Path) -> None:
    number = forge.open_task("issue", "Two files", "Please write notes.txt and more.txt.")
    machine_a, machine_b = tmp_path / "machine-a", tmp_path / "machine-b"
    seen_on_b: list[str] = []

    def look(_: dict[str, Any]) -> None:  # B's first request: its clone is in place by now
        seen_on_b.extend(path.read_text() for path in machine_b.glob("*/notes.txt"))

    with ReplaySandbox(SCRIPT, actions={"look": look}) as model:
        on_a = steering_config(tmp_path, [forge], model, workspace={"base_dir": str(machine_a)})
        gate = _pause_during_the_gate(machine_a, tmp_path / "contexts" / "pause_signal")
        first = run_cycle(load_for_service(on_a))
        gate.join(timeout=10)
        assert [result.status for result in first.results] == ["paused"]
        assert "coding agent paused" in forge.labels("issue", number)
        pause_notice = forge.comments("issue", number)[-1][1]

        # The pause pushed a WIP commit to the task's branch, and opened no PR/MR.
        branch = task_branch(forge, number)
        assert branch_file(forge, branch, "notes.txt") == "edited on machine A\n"
        assert branch_log(forge, branch)[0] == "WIP: Two files (paused)"
        assert change_heads(forge) == []
        [paused] = list((tmp_path / "contexts" / "paused").iterdir())
        state = json.loads((paused / "task_state.json").read_text())
        assert state["messages"][-1]["role"] == "tool", "paused after the tool result, before it was sent"
        assert state["branch"] == branch and state["commit"] == forge.sandbox.state.branches("acme/widgets")[branch]  # type: ignore[attr-defined]
        assert "workspace" not in state
        assert f"pushed to `{branch}` (commit `{state['commit'][:12]}`)" in pause_notice

        # Nothing saved names machine A's workspace root; A keeps the paused run's clone.
        [clone_a] = list(machine_a.iterdir())
        git_dir_a = Path(f"{machine_a}.git-dirs") / clone_a.name
        assert git_dir_a.is_dir()
        leaks = [name for name, data in _saved_files(tmp_path).items() if str(machine_a).encode() in data]
        assert leaks == [], "the saved state names no path of machine A"

        (tmp_path / "contexts" / "pause_signal").unlink()
        on_b = steering_config(tmp_path, [forge], model, workspace={"base_dir": str(machine_b)})
        second = run_cycle(load_for_service(on_b))
        requests = model.requests
        on_a = steering_config(tmp_path, [forge], model, workspace={"base_dir": str(machine_a)})  # A's config again

    assert [result.status for result in second.results] == ["done"]
    assert len(requests) == len(SCRIPT["replies"]), "no step was asked for twice"
    last = requests[1].body["messages"][-1]
    assert last["role"] == "tool" and "notes.txt written" in str(last["content"]), "the unsent tool result is sent"
    assert seen_on_b == ["edited on machine A\n"], "B's clone was recreated from the branch, with A's edit"
    assert change_heads(forge) == [branch], "delivery opened the PR/MR at done"
    assert branch_file(forge, branch, "notes.txt") == "edited on machine A\n"
    assert branch_file(forge, branch, "more.txt") == "more\n"
    assert branch_log(forge, branch)[:2] == ["Wrote notes.txt and more.txt.", "WIP: Two files (paused)"]
    labels = forge.labels("issue", number)
    assert "coding agent done" in labels and "coding agent paused" not in labels
    assert not any(machine_b.iterdir()), "B's clone is deleted once the run is done"
    # The clone the run left on A, which ended on B, goes at A's next cleanup.
    assert clone_a.is_dir() and git_dir_a.is_dir()
    swept = run_cli(on_a, "cleanup")
    assert swept.returncode == 0 and "1 ended run(s)' clone(s)" in swept.stdout, swept.stdout + swept.stderr
    assert not clone_a.exists() and not git_dir_a.exists()

"""Stop by unassigning the bot (SPEC 8.2), seed 002's scenarios S1-S4, S7 and S8.

The bot is assigned when the run starts; the replay model's script unassigns it (or
breaks the assignee read, or sets the pause signal) while the model "thinks", exactly as
a person on the forge would between two steps.
"""

from __future__ import annotations

import json
import re
import time
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest

from coding_agent.agent.steering.interrupts import REQUEST_READ_SECONDS
from coding_agent.sandbox.faults import Fault
from coding_agent.sandbox.replay_model import ReplaySandbox

from ._steering import (
    assign,
    pause_signal_action,
    run_cycle,
    steering_config,
    three_files_script,
    unassign,
    wait_for,
)
from .conftest import ForgeUnderTest, Kind, load_for_service, run_cli

def _assignee_read(forge: ForgeUnderTest, kind: Kind, number: int) -> str:
    """The request pattern of a fresh assignee read (GitHub reads PR assignees as an issue)."""
    if forge.name == "github":
        return rf"^GET /repos/acme/widgets/issues/{number}$"
    route = "issues" if kind == "issue" else "merge_requests"
    return rf"^GET /api/v4/projects/acme(%2F|/)widgets/{route}/{number}$"


@pytest.mark.parametrize("kind", ["issue", "change"], ids=["issue", "pr-mr"])
def test_unassigning_the_bot_stops_the_run(forge: ForgeUnderTest, kind: Kind, tmp_path: Path) -> None:
    """S1 (GitHub issue), S2 (GitHub PR), S3 (GitLab issue), S4 (GitLab MR)."""
    number = forge.open_task(kind, "Three files", "Please write a, b and c.")
    assign(forge, kind, number)

    with ReplaySandbox(three_files_script(1, "unassign"), actions={"unassign": lambda _: unassign(forge, kind, number)}) as model:
        setup = steering_config(tmp_path, [forge], model)
        report = run_cycle(load_for_service(setup))
        requests = model.requests

    assert [result.status for result in report.results] == ["stopped"]
    assert len(requests) == 2, "stopped at the checkpoint right after the reply, before its action"
    labels = forge.labels(kind, number)
    assert "coding agent stopped" in labels
    assert "coding agent processing" not in labels and "coding agent done" not in labels
    bodies = [body for _, body in forge.comments(kind, number)]
    stop = bodies[-1]
    assert stop.startswith("## ⛔ Task stopped") and "unassigned" in stop
    assert "**LLM turns:** 2" in stop
    stamp = re.search(r"\*\*Stopped at:\*\* (\S+)", stop)
    assert stamp is not None and datetime.fromisoformat(stamp.group(1)).tzinfo is not None, "ISO 8601 with zone"
    assert sum(body.startswith("## ⛔") for body in bodies) == 1
    [run_dir] = setup.completed_runs()
    assert json.loads((run_dir / "metadata.json").read_text())["status"] == "stopped"
    tools = [json.loads(line) for line in (run_dir / "tools.jsonl").read_text().splitlines()]
    assert [(t["tool"], t["args"]["path"], t["is_error"]) for t in tools] == [("workspace/create", "a.txt", False)]
    assert not any(setup.workspaces.iterdir()), "a stopped run's clone is deleted (the second action never ran)"
    assert not any(Path(f"{setup.workspaces}.git-dirs").iterdir()), "and its git directory"


def test_a_failing_assignee_read_never_stops_the_run(
    forge: ForgeUnderTest, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """S7: the read fails (retries used up); the run goes on and finishes, the error is logged."""
    number = forge.open_task("issue", "Three files", "Please write a, b and c.")
    assign(forge, "issue", number)
    faults = forge.sandbox.faults  # type: ignore[attr-defined]
    pattern = _assignee_read(forge, "issue", number)

    def break_reads(_: dict[str, Any]) -> None:
        faults.add(Fault(pattern=pattern, count=12, status=503))

    with ReplaySandbox(three_files_script(0, "break"), actions={"break": break_reads}) as model:
        setup = steering_config(tmp_path, [forge], model, retry={"retries": 1, "base_delay_seconds": 0.01})
        report = run_cycle(load_for_service(setup))

    assert [result.status for result in report.results] == ["done"]
    assert faults.injected >= 2, "the assignee read really failed"
    assert "coding agent done" in forge.labels("issue", number)
    assert any("could not read the assignees" in r.getMessage() for r in caplog.records if r.levelname == "ERROR")


def test_pause_wins_over_unassign_at_the_same_checkpoint(github_forge: ForgeUnderTest, tmp_path: Path) -> None:
    """S8: the pause signal and the unassign arrive together; pause is checked first."""
    number = github_forge.open_task("issue", "Three files", "Please write a, b and c.")
    assign(github_forge, "issue", number)
    pause = pause_signal_action(tmp_path)

    def both(args: dict[str, Any]) -> None:
        pause(args)
        unassign(github_forge, "issue", number)

    with ReplaySandbox(three_files_script(1, "both"), actions={"both": both}) as model:
        setup = steering_config(tmp_path, [github_forge], model)
        report = run_cycle(load_for_service(setup))

    assert [result.status for result in report.results] == ["paused"]
    labels = github_forge.labels("issue", number)
    assert "coding agent paused" in labels and "coding agent stopped" not in labels
    assert "coding agent processing" not in labels
    bodies = [body for _, body in github_forge.comments("issue", number)]
    assert bodies[-1].startswith("## ⏸️ Task paused") and not any(body.startswith("## ⛔") for body in bodies)
    [paused] = list((setup.contexts / "paused").iterdir())
    assert (paused / "task_state.json").exists()


def test_check_interval_zero_disables_the_stop(github_forge: ForgeUnderTest, tmp_path: Path) -> None:
    number = github_forge.open_task("issue", "Three files", "Please write a, b and c.")
    assign(github_forge, "issue", number)

    actions = {"unassign": lambda _: unassign(github_forge, "issue", number)}
    with ReplaySandbox(three_files_script(0, "unassign"), actions=actions) as model:
        setup = steering_config(tmp_path, [github_forge], model, task_stop={"check_interval": 0})
        report = run_cycle(load_for_service(setup))

    assert [result.status for result in report.results] == ["done"]
    assert "coding agent done" in github_forge.labels("issue", number)


def test_cli_stop_of_a_running_task(github_forge: ForgeUnderTest, tmp_path: Path) -> None:
    """`coding-agent stop TASK` while the model works: the run stops at the next checkpoint."""
    number = github_forge.open_task("issue", "Three files", "Please write a, b and c.")
    key = f"github:acme/widgets#{number}"
    results: list[Any] = []

    def operator_stop(_: dict[str, Any]) -> None:
        started = time.monotonic()
        results.append(run_cli(setup, "stop", key))
        # The worker reuses a read of operator requests briefly: answer after a fresh one is due.
        wait_for(lambda: time.monotonic() - started > REQUEST_READ_SECONDS, 10, "a fresh request read")

    with ReplaySandbox(three_files_script(1, "stop"), actions={"stop": operator_stop}) as model:
        setup = steering_config(tmp_path, [github_forge], model)
        report = run_cycle(load_for_service(setup))

    [stopped] = results
    assert stopped.returncode == 0 and "stop requested" in stopped.stdout, stopped.stderr
    assert [result.status for result in report.results] == ["stopped"]
    labels = github_forge.labels("issue", number)
    assert "coding agent stopped" in labels and "coding agent done" not in labels
    assert "An operator stopped" in github_forge.comments("issue", number)[-1][1]


def test_cli_stop_of_a_paused_task(github_forge: ForgeUnderTest, tmp_path: Path) -> None:
    number = github_forge.open_task("issue", "Three files", "Please write a, b and c.")
    key = f"github:acme/widgets#{number}"
    signal_file = tmp_path / "contexts" / "pause_signal"
    with ReplaySandbox(three_files_script(1, "pause"), actions={"pause": pause_signal_action(tmp_path)}) as model:
        setup = steering_config(tmp_path, [github_forge], model)
        assert [r.status for r in run_cycle(load_for_service(setup)).results] == ["paused"]
        signal_file.unlink()
        stopped = run_cli(setup, "stop", key)
        requests = len(model.requests)

    assert stopped.returncode == 0, stopped.stderr
    assert f"{key}: stopped" in stopped.stdout
    assert requests == 2, "stopping a paused task asks the model nothing more"
    labels = github_forge.labels("issue", number)
    assert "coding agent stopped" in labels and not {"coding agent paused", "coding agent processing"} & set(labels)
    assert github_forge.comments("issue", number)[-1][1].startswith("## ⛔ Task stopped")
    assert not (setup.contexts / "paused").exists() or not any((setup.contexts / "paused").iterdir())


def _add_stop_label(forge: ForgeUnderTest, kind: Kind, number: int, actor: str = "alice") -> None:
    """Someone (a maintainer by default) adds the stop label on the forge while the model thinks."""
    state: Any = forge.sandbox.state  # type: ignore[attr-defined]
    if forge.name == "github":
        state.add_label("acme/widgets", number, "coding agent stop", actor=actor)
    else:
        state.add_label("acme/widgets", number, "coding agent stop", actor=actor, kind="issue" if kind == "issue" else "mr")


@pytest.mark.parametrize("kind", ["issue", "change"], ids=["issue", "pr-mr"])
def test_the_stop_label_stops_a_task_started_by_its_label_alone_and_is_removed(
    forge: ForgeUnderTest, kind: Kind, tmp_path: Path
) -> None:
    """SPEC 17: no assignee to remove (an app cannot be assigned): the stop label stops the
    run at its next check like an unassign, and is taken off when the stop is done."""
    number = forge.open_task(kind, "Three files", "Please write a, b and c.")
    script = three_files_script(1, "stop_label")
    with ReplaySandbox(script, actions={"stop_label": lambda _: _add_stop_label(forge, kind, number)}) as model:
        setup = steering_config(tmp_path, [forge], model)
        report = run_cycle(load_for_service(setup))
        requests = model.requests
    assert [result.status for result in report.results] == ["stopped"]
    assert len(requests) == 2, "stopped at the checkpoint right after the reply, before its action"
    labels = forge.labels(kind, number)
    assert "coding agent stopped" in labels
    assert "coding agent stop" not in labels, "the stop label is removed once the stop is done"
    assert "coding agent processing" not in labels
    stop = [body for _, body in forge.comments(kind, number)][-1]
    assert stop.startswith("## ⛔ Task stopped") and "stop label" in stop


def test_the_stop_label_added_without_write_access_stops_nothing(forge: ForgeUnderTest, tmp_path: Path) -> None:
    """A reader (GitHub read, GitLab Reporter: labels are theirs to add on some forges)
    adds the stop label: the run goes on and ends done."""
    number = forge.open_task("issue", "Three files", "Please write a, b and c.")
    script = three_files_script(1, "stop_label")
    with ReplaySandbox(script, actions={"stop_label": lambda _: _add_stop_label(forge, "issue", number, actor="rita")}) as model:
        setup = steering_config(tmp_path, [forge], model)
        report = run_cycle(load_for_service(setup))
    assert [result.status for result in report.results] == ["done"]
    assert "coding agent done" in forge.labels("issue", number)

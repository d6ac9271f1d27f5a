"""Taking over from a dead worker at the two moments a random kill rarely hits.

Each test leaves the world exactly as a worker killed at that moment would (labels on
the forge, rows in the state store, files in contexts/), with its lease already expired,
and checks that the next poll finishes the task once.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from sqlalchemy import text

from coding_agent.context.storage import ContextStorage
from coding_agent.redaction import Redactor
from coding_agent.sandbox.replay_model import ReplaySandbox
from coding_agent.store.state import StateStore

from ._steering import run_cycle, steering_config
from .conftest import BOT, HELLO_SCRIPT, MAINTAINER, READER, REPO, GitHubForge, load_for_service, progress_comments


def _store(directory: Path) -> StateStore:
    return StateStore(f"sqlite:///{directory / 'state.db'}")


def _expired_lease(directory: Path, key: str) -> None:
    """The lease a dead worker took on `key`, already run out."""
    store = _store(directory)
    try:
        assert store.leases.acquire_lease(key, "dead-worker", -1), "a lease that has already run out"
    finally:
        store.close()


def _dead_run(forge: GitHubForge, directory: Path, number: int, status: str, final: str) -> str:
    """The world a worker leaves when it dies publishing: processing label, the run in the
    store with its outcome recorded, its context in running/, its lease run out."""
    state = forge.sandbox.state
    state.remove_label(REPO, number, "coding agent", actor=BOT)
    state.add_label(REPO, number, "coding agent processing", actor=BOT)
    key = f"github:{REPO}#{number}"
    ContextStorage(directory / "contexts", Redactor()).start_run("dead-run", task_key=key)
    store = _store(directory)
    try:
        store.runs.start_run("dead-run", key, "dead-worker", MAINTAINER)
        store.steering.record_final("dead-run", status, final)
        assert store.leases.acquire_lease(key, "dead-worker", -1)
    finally:
        store.close()
    return key


def test_a_worker_dead_between_claim_and_run_start(github_forge: GitHubForge, tmp_path: Path) -> None:
    """Labels swapped halfway (trigger and processing both on), lease taken, no run yet."""
    number = github_forge.open_task("issue", "Add a greeting file", "Please add hello.txt.")
    state = github_forge.sandbox.state
    state.add_label(REPO, number, "coding agent processing", actor=BOT)
    key = f"github:{REPO}#{number}"
    with ReplaySandbox(HELLO_SCRIPT) as model:
        setup = steering_config(tmp_path, [github_forge], model)
        _expired_lease(tmp_path, key)
        report = run_cycle(load_for_service(setup))
        again = run_cycle(load_for_service(setup))

    assert [result.status for result in report.results] == ["done"]
    assert again.results == (), "the trigger label is gone: no second run"
    lifecycle = [label for label in github_forge.labels("issue", number) if label.startswith("coding agent")]
    assert lifecycle == ["coding agent done"]
    finals = [body for author, body in github_forge.comments("issue", number) if author == BOT]
    assert len([body for body in finals if body not in progress_comments(finals)]) == 1


@pytest.mark.parametrize("labelled_by", [MAINTAINER, READER])
def test_a_worker_dead_between_its_lease_and_its_label_swap(
    github_forge: GitHubForge, tmp_path: Path, labelled_by: str
) -> None:
    """Lease taken, labels not touched yet: the task looks both orphaned (a lease run out)
    and new (the trigger label alone). The producer offers it once, as a run to continue;
    with no run to continue, the same look must still claim it as new, with the trust
    check of any new claim (a reader's label starts nothing). A SIGKILL trial found it
    skipped by `run --once`: it waited for the next poll."""
    number = github_forge.open_task("issue", "Add a greeting file", "Please add hello.txt.", labelled_by=labelled_by)
    key = f"github:{REPO}#{number}"
    with ReplaySandbox(HELLO_SCRIPT) as model:
        setup = steering_config(tmp_path, [github_forge], model)
        _expired_lease(tmp_path, key)
        report = run_cycle(load_for_service(setup))
        requests = len(model.requests)

    lifecycle = [label for label in github_forge.labels("issue", number) if label.startswith("coding agent")]
    if labelled_by == MAINTAINER:
        assert [result.status for result in report.results] == ["done"]
        assert lifecycle == ["coding agent done"]
    else:
        assert (report.results, requests) == ((), 0), "an untrusted trigger starts no run"
        assert lifecycle == ["coding agent"]
        bodies = [body for author, body in github_forge.comments("issue", number) if author == BOT]
        assert len(bodies) == 1 and READER in bodies[0], bodies  # the one explanation


def test_a_worker_dead_after_posting_its_final_comment(github_forge: GitHubForge, tmp_path: Path) -> None:
    """The outcome was recorded and its comment posted, but the worker died before saying so."""
    number = github_forge.open_task("issue", "Add a greeting file", "Please add hello.txt.")
    final = "Wrote hello.txt with a greeting."
    key = _dead_run(github_forge, tmp_path, number, "done", final)
    github_forge.sandbox.state.add_comment(REPO, number, BOT, final)
    with ReplaySandbox(HELLO_SCRIPT) as model:
        setup = steering_config(tmp_path, [github_forge], model)
        report = run_cycle(load_for_service(setup))
        requests = model.requests

    assert [(result.run_uuid, result.status) for result in report.results] == [("dead-run", "done")]
    assert requests == [], "nothing was left to ask the model"
    bodies = [body for author, body in github_forge.comments("issue", number) if author == BOT]
    assert bodies.count(final) == 1, "the final comment is not posted twice"
    lifecycle = [label for label in github_forge.labels("issue", number) if label.startswith("coding agent")]
    assert lifecycle == ["coding agent done"]
    store = _store(tmp_path)
    try:
        [run] = store.runs.all(key)
        assert run.status == "done" and store.steering.run_marks("dead-run").final_posted
    finally:
        store.close()
    assert (tmp_path / "contexts" / "completed" / "dead-run").is_dir()


def test_a_worker_dead_while_publishing_a_stop(github_forge: GitHubForge, tmp_path: Path) -> None:
    """The stop was decided and recorded, its comment not posted yet: the takeover finishes the stop."""
    number = github_forge.open_task("issue", "Add a greeting file", "Please add hello.txt.")
    stop = "## ⛔ Task stopped\n\nThe coding agent was unassigned, so it stopped working on this task."
    _dead_run(github_forge, tmp_path, number, "stopped", stop)
    with ReplaySandbox(HELLO_SCRIPT) as model:
        setup = steering_config(tmp_path, [github_forge], model)
        report = run_cycle(load_for_service(setup))
        requests = model.requests

    assert [result.status for result in report.results] == ["stopped"] and requests == []
    assert [body for author, body in github_forge.comments("issue", number) if author == BOT] == [stop]
    lifecycle = [label for label in github_forge.labels("issue", number) if label.startswith("coding agent")]
    assert lifecycle == ["coding agent stopped"]


def test_a_run_left_running_behind_a_newer_finished_run_is_closed(github_forge: GitHubForge, tmp_path: Path) -> None:
    """A stalled worker's lease ran out, another worker started a run of its own and
    finished the task; the stalled one had recorded a run meanwhile and was killed before
    it noticed. That older run is `running` without a lease, so the task is offered as
    orphaned at every poll: the next one closes it `abandoned`, and runs nothing again."""
    number = github_forge.open_task("issue", "Add a greeting file", "Please add hello.txt.")
    key = f"github:{REPO}#{number}"
    with ReplaySandbox(HELLO_SCRIPT) as model:
        setup = steering_config(tmp_path, [github_forge], model)
        assert [result.status for result in run_cycle(load_for_service(setup)).results] == ["done"]
        store = _store(tmp_path)
        try:
            [done] = store.runs.all(key)
            store.runs.start_run("stalled-run", key, "stalled-worker", MAINTAINER)
            with store.engine.begin() as connection:  # it began just before the finished run
                connection.execute(
                    text("UPDATE runs SET started_at = :at WHERE uuid = 'stalled-run'"), {"at": done.started_at - 1}
                )
            assert store.runs.orphaned_tasks() == [key]
            report = run_cycle(load_for_service(setup))
            runs = {run.uuid: run.status for run in store.runs.all(key)}
            orphaned = store.runs.orphaned_tasks()
        finally:
            store.close()
        requests = len(model.requests)

    assert report.results == (), "nothing is run again"
    assert runs == {done.uuid: "done", "stalled-run": "abandoned"}
    assert orphaned == []
    assert requests == len(HELLO_SCRIPT["replies"]), "no model request after the first run's"
    bodies = [body for author, body in github_forge.comments("issue", number) if author == BOT]
    assert len([body for body in bodies if body not in progress_comments(bodies)]) == 1
    lifecycle = [label for label in github_forge.labels("issue", number) if label.startswith("coding agent")]
    assert lifecycle == ["coding agent done"]

"""Leases under a live run (SPEC 3): a heartbeat keeps them, a taken one stops the run.

The first test is the failure seen in the field: one model call three times as long as
the lease, and a second worker polling meanwhile. Without a heartbeat independent of
model replies the second worker takes the task over and both publish.
"""

from __future__ import annotations

import asyncio
import threading
import time
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import create_engine, text

from coding_agent.config import AgentConfig
from coding_agent.runtime.service import AgentService, CycleReport
from coding_agent.sandbox.faults import Fault
from coding_agent.sandbox.replay_model import ReplaySandbox
from coding_agent.store.state import StateStore
from tests.support.state import agent_store
from tests.support.waiting import wait_until

from ._steering import steering_config
from .conftest import BOT, HELLO_SCRIPT, REPO, GitHubForge, load_for_service, progress_comments

LEASE_SECONDS = 1.0


def _lifecycle(forge: GitHubForge, number: int) -> list[str]:
    return [label for label in forge.labels("issue", number) if label.startswith("coding agent")]


def _final_comments(forge: GitHubForge, number: int) -> list[str]:
    bodies = [body for author, body in forge.comments("issue", number) if author == BOT]
    return [body for body in bodies if body not in progress_comments(bodies)]


async def _two_workers(config: AgentConfig, model: ReplaySandbox) -> tuple[CycleReport, list[CycleReport]]:
    """Worker A works the task; once A waits on the model, worker B polls again and
    again until A is finished."""
    first, second = AgentService(config), AgentService(config)
    try:
        working = asyncio.create_task(first.run_cycle())
        await wait_until(lambda: model.requests or working.done(), 120, "worker A's first model request")
        others: list[CycleReport] = []
        while not working.done():
            others.append(await second.run_cycle())
            await asyncio.wait({working}, timeout=0.1)  # B's poll interval, cut short once A ends
        return await working, others
    finally:
        await first.aclose()
        await second.aclose()


def test_a_model_call_three_times_the_lease_keeps_one_worker(github_forge: GitHubForge, tmp_path: Path) -> None:
    number = github_forge.open_task("issue", "Add a greeting file", "Please add hello.txt.")
    script = {**HELLO_SCRIPT, "latency_seconds": 3 * LEASE_SECONDS}
    with ReplaySandbox(script) as model:
        setup = steering_config(tmp_path, [github_forge], model, scheduling={"lease_seconds": LEASE_SECONDS})
        report, others = asyncio.run(_two_workers(load_for_service(setup), model))
        conversations = {request.conversation for request in model.requests}

    assert [result.status for result in report.results] == ["done"]
    assert [result for other in others for result in other.results] == [], "the second worker never ran it"
    assert len(conversations) == 1, "one model conversation"
    [final] = _final_comments(github_forge, number)
    assert final.startswith("Wrote hello.txt with a greeting.")
    assert _lifecycle(github_forge, number) == ["coding agent done"]
    with agent_store(tmp_path) as store:
        assert [run.status for run in store.runs.all()] == ["done"]


@pytest.mark.parametrize("run_taken_too", [False, True])
def test_a_worker_whose_lease_was_taken_stops_without_writing(
    github_forge: GitHubForge, tmp_path: Path, run_taken_too: bool
) -> None:
    """Another worker holds the lease now (this one froze past its expiry): the run stops at
    its next step and writes nothing more on the task: no comment, no label. Its own row
    in the state store ends `abandoned` (left `running`, nobody would ever close it when
    the new holder started a run of its own); when the new holder took this very run
    over (`run_taken_too`), the row is the holder's and stays as the holder has it."""
    number = github_forge.open_task("issue", "Add a greeting file", "Please add hello.txt.")
    key = f"github:{REPO}#{number}"
    database = tmp_path / "state.db"

    def steal(_: dict[str, Any]) -> None:
        engine = create_engine(f"sqlite:///{database}")
        with engine.begin() as connection:
            connection.execute(
                text("UPDATE leases SET owner = 'thief', expires_at = :until WHERE task_key = :key"),
                {"until": time.time() + 600, "key": key},
            )
            if run_taken_too:  # as `Recovery` claims a run it takes over
                connection.execute(text("UPDATE runs SET owner = 'thief' WHERE task_key = :key"), {"key": key})
        engine.dispose()

    script = {"replies": [{**HELLO_SCRIPT["replies"][0], "before": {"steal": {}}}, *HELLO_SCRIPT["replies"][1:]]}
    with ReplaySandbox(script, actions={"steal": steal}) as model:
        setup = steering_config(
            tmp_path, [github_forge], model, scheduling={"lease_seconds": 3.0}, progress_comment={"enabled": False}
        )
        config = load_for_service(setup)
        comments_before: list[str] = []

        async def once() -> CycleReport:
            service = AgentService(config)
            try:
                return await service.run_cycle()
            finally:
                await service.aclose()

        report = asyncio.run(once())
        requests = model.requests

    assert [result.status for result in report.results] == ["abandoned"]
    assert len(requests) == 1, "no model request after the lease was found taken"
    assert _final_comments(github_forge, number) == comments_before, "nothing written on the task"
    assert _lifecycle(github_forge, number) == ["coding agent processing"], "labels left to the lease's holder"
    assert not (tmp_path / "workspaces").exists() or all(
        not (path / "hello.txt").exists() for path in (tmp_path / "workspaces").iterdir()
    ), "the step's tool did not run"
    store = StateStore(f"sqlite:///{database}")
    try:
        [run] = store.runs.all()
    finally:
        store.close()
    assert (run.status, run.owner) == (("running", "thief") if run_taken_too else ("abandoned", run.owner)), run


def test_a_claim_that_outlasts_its_lease_starts_no_run(github_forge: GitHubForge, tmp_path: Path) -> None:
    """Worker A takes the lease and stalls in its claim (its read of who labelled the task
    hangs) past the lease; worker B takes the task and runs it to the end. When A wakes,
    it must not swap labels on a task that is B's, start a run, or leave a `running` row
    behind: the claim renews the lease before it writes anything, and a run is recorded
    only under a lease that holds."""
    number = github_forge.open_task("issue", "Add a greeting file", "Please add hello.txt.")
    key = f"github:{REPO}#{number}"
    gate = threading.Event()
    who_labelled = rf"GET /repos/{REPO}/issues/{number}/events$"  # read by the claim only, under the lease
    github_forge.sandbox.faults.add(Fault(pattern=who_labelled, status=None, hold=gate))
    with ReplaySandbox(HELLO_SCRIPT) as model:
        setup = steering_config(tmp_path, [github_forge], model, scheduling={"lease_seconds": LEASE_SECONDS})
        config = load_for_service(setup)
        store = StateStore(f"sqlite:///{tmp_path / 'state.db'}")

        async def both() -> tuple[CycleReport, CycleReport]:
            first, second = AgentService(config), AgentService(config)
            try:
                stalled = asyncio.create_task(first.run_cycle())
                await wait_until(lambda: github_forge.sandbox.faults.injected == 1, 60, "worker A's claim to stall")
                await wait_until(lambda: store.leases.lease_owner(key) is None, 60, "worker A's lease to run out")
                taken = await second.run_cycle()
                gate.set()
                return await stalled, taken
            finally:
                gate.set()
                await first.aclose()
                await second.aclose()

        try:
            stalled, taken = asyncio.run(both())
            runs = store.runs.all()
        finally:
            store.close()
        conversations = {request.conversation for request in model.requests}

    assert [result.status for result in taken.results] == ["done"]
    assert [result.status for result in stalled.results if result.status != "abandoned"] == [], stalled
    assert [run.status for run in runs] == ["done"], runs
    assert len(conversations) == 1, "one model conversation: B's"
    assert len(_final_comments(github_forge, number)) == 1
    assert _lifecycle(github_forge, number) == ["coding agent done"]

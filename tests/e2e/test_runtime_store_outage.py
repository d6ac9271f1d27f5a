"""A state store outage mid-run is a pause, not a failure (SPEC 3, SPEC 15).

`serve` on a PostgreSQL server of the test's own, which is SIGKILLed while tasks run and
others wait in the queue, and started again a moment later; or on SQLite, whose file
another process locks for longer than the store's busy timeout: the runs hold at their
next store call and carry on once it answers; nothing ends with an internal error, no
task is left `processing`, every task is done exactly once, with the default lease.
"""

from __future__ import annotations

import asyncio
import logging
import sqlite3
import threading
import time
from pathlib import Path
from typing import Any, Protocol

import pytest
from sqlalchemy.exc import OperationalError

from coding_agent.runtime.service import AgentService
from coding_agent.sandbox.replay_model import ReplaySandbox
from tests.support.waiting import wait_for, wait_until

from ..postgres import OwnPostgres, own_postgres_or_skip
from ._steering import steering_config
from .conftest import BOT, REPO, GitHubForge, load_for_service, progress_comments

TASKS = 6
WORKERS = 2
# Once the store is back, the runs it held finish and the queued tasks run; the issue's
# bar is a minute on an idle machine, this deadline leaves room for a loaded one (a run
# left to its lease would take 900 s).
RECOVERY_DEADLINE_SECONDS = 180


def _steps(second: dict[str, Any]) -> list[dict[str, Any]]:
    """Five steps: four files written, then done; `second` goes into the second reply."""
    replies: list[dict[str, Any]] = [
        {"tool": "workspace/create", "args": {"path": f"step{n}.txt", "content": f"{n}\n"}, "comment": f"Step {n}."}
        for n in range(1, 5)
    ]
    replies[1] = {**replies[1], **second}
    return [*replies, {"done": "Wrote four files."}]


def _finals(forge: GitHubForge, number: int) -> list[str]:
    bodies = [body for author, body in forge.comments("issue", number) if author == BOT]
    return [body for body in bodies if body not in progress_comments(bodies)]


def _lifecycle(forge: GitHubForge, number: int) -> list[str]:
    return [label for label in forge.labels("issue", number) if label.startswith("coding agent")]


async def _serve_until_done(setup: Any, tasks: int, ended_at: list[float]) -> list[tuple[str, str]]:
    """`serve` until `tasks` runs are done (the deadline counted from the outage's end),
    then every run's (task key, status)."""
    service = AgentService(load_for_service(setup))
    stop = asyncio.Event()
    serving = asyncio.create_task(service.serve(stop))

    def all_done() -> bool:
        try:
            return [run.status for run in service.store.runs.all()].count("done") >= tasks or serving.done()
        except OperationalError:  # the test's own look goes through the database that is away
            return serving.done()

    try:
        await wait_until(lambda: ended_at or serving.done(), 300, "the store outage to begin and end")
        await wait_until(all_done, RECOVERY_DEADLINE_SECONDS, "every task to be done after the store was back")
        return [(run.task_key, run.status) for run in service.store.runs.all()]
    finally:
        stop.set()
        await serving
        await service.aclose()


class _StoreOutage(Protocol):
    """Makes the state store unavailable (`begin`) and available again (`end`)."""

    def begin(self) -> None: ...
    def end(self) -> None: ...


def assert_every_task_ends_done_once_through(
    forge: GitHubForge, tmp_path: Path, caplog: pytest.LogCaptureFixture, url: str, outage: _StoreOutage
) -> None:
    """`serve` on `url` with TASKS tasks and WORKERS slots; once every slot's run asked
    for its second step (all of them in their loops, the rest queued), the outage
    begins; it ends once each running run met it (in a thread: the model answers
    meanwhile, so the runs go on to their next store call). Then every task must end
    done exactly once, none left processing, with no traceback and no internal error."""
    caplog.set_level(logging.INFO)
    ended_at: list[float] = []
    second_steps: list[int] = []

    def every_running_run_met_it() -> bool:
        """Each running run held at a store call ("waiting for it") or failed of it."""
        messages = [record.getMessage() for record in caplog.records if record.name.startswith("coding_agent.")]
        tasks = {
            message.split(": ")[0]
            for message in messages
            if message.startswith("github:") and ("waiting for it" in message or "internal error" in message)
        }
        return len(tasks) >= WORKERS

    def end_once_met() -> None:
        try:
            wait_for(every_running_run_met_it, 120, "both running runs to meet the store away")
        finally:
            outage.end()
            ended_at.append(time.monotonic())

    def begin_the_outage(_: dict[str, Any]) -> None:
        second_steps.append(1)
        if len(second_steps) == WORKERS:
            outage.begin()
            ender.start()

    ender = threading.Thread(target=end_once_met, name="end the store outage")
    numbers = [forge.open_task("issue", f"Task {n} of the outage", f"Please write files ({n}).") for n in range(1, TASKS + 1)]
    script = {"replies": _steps({"before": {"begin_the_outage": {}}})}
    with ReplaySandbox(script, actions={"begin_the_outage": begin_the_outage}) as model:
        setup = steering_config(
            tmp_path, [forge], model, workers=WORKERS, database={"url": url}, scheduling={"interval_seconds": 0.5}
        )
        runs = asyncio.run(asyncio.wait_for(_serve_until_done(setup, TASKS, ended_at), 600))
        print(f"every task done {time.monotonic() - ended_at[0]:.1f} s after the store was back")
    ender.join()

    assert sorted(runs) == sorted((f"github:{REPO}#{n}", "done") for n in numbers), "one run per task, each done"
    for number in numbers:
        assert len(_finals(forge, number)) == 1, number
        assert _lifecycle(forge, number) == ["coding agent done"], number
    assert "Traceback" not in caplog.text
    assert "internal error" not in caplog.text


class _Killed:
    """PostgreSQL SIGKILLed, then started again."""

    def __init__(self, database: OwnPostgres) -> None:
        self._database = database

    def begin(self) -> None:
        self._database.kill()

    def end(self) -> None:
        self._database.start()


class _Locked:
    """Another process (an operator's `sqlite3` shell, a backup) holds the SQLite file's
    write lock past the store's busy timeout: every write meets `database is locked`.
    (A directory made unreadable stops nothing here: the tests run as root, and the
    connections already open keep their file either way.)"""

    def __init__(self, path: Path) -> None:
        self._path = path
        self._holder: sqlite3.Connection | None = None

    def begin(self) -> None:
        self._holder = sqlite3.connect(self._path, isolation_level=None, check_same_thread=False)
        self._holder.execute("BEGIN EXCLUSIVE")

    def end(self) -> None:
        assert self._holder is not None
        self._holder.execute("ROLLBACK")
        self._holder.close()


@pytest.mark.long
def test_postgresql_killed_mid_run_holds_the_runs_and_every_task_ends_done_once(
    github_forge: GitHubForge, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    with own_postgres_or_skip() as database:
        assert_every_task_ends_done_once_through(github_forge, tmp_path, caplog, database.url, _Killed(database))


@pytest.mark.long
def test_sqlite_locked_past_its_busy_timeout_mid_run_holds_the_runs_and_every_task_ends_done_once(
    github_forge: GitHubForge, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    path = tmp_path / "state.db"
    assert_every_task_ends_done_once_through(github_forge, tmp_path, caplog, f"sqlite:///{path}", _Locked(path))

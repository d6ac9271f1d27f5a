"""Daily budgets (SPEC 11.5) end to end on the sandbox GitHub forge with the replay model.

A task whose requester or repository is over its daily budget is not started: it gets one
comment naming the budget, the use and the reset, carries the paused label, and starts by
itself once the budget is raised. A run that crosses a budget finishes its step and
pauses with the same comment. Follow-ups count toward the requester who started the task.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import quote
from typing import Any

import httpx
import pytest

from coding_agent.config import AgentConfig
from coding_agent.sandbox.replay_model import ReplaySandbox
from coding_agent.store.state import StateStore
from coding_agent.web.server import serving_dashboard

from tests.postgres import fresh_postgres_or_skip
from tests.support.state import agent_store

from ._steering import THREE_FILES, post_comment, run_cycle, steering_config
from .conftest import BOT, MAINTAINER, REPO, AgentSetup, GitHubForge, load_for_service, run_cli

BUDGET_HEADER = "## ⏸️ Waiting for a daily budget"
WRITER = "walt"
PAUSED = "coding agent paused"


def _task_script(*titles: str) -> dict[str, Any]:
    """One short conversation per task title: a file, then done (`DONE-<index>`); the
    first whose title a request holds answers it."""
    return {
        "conversations": [
            {
                "match": title,
                "replies": [
                    {"tool": "workspace/create", "args": {"path": f"{index}.txt", "content": "hi\n"}},
                    {"done": f"DONE-{index}"},
                ],
            }
            for index, title in enumerate(titles)
        ]
    }


def _setup(tmp_path: Path, forge: GitHubForge, model: ReplaySandbox, **budget: Any) -> AgentSetup:
    """The config file with daily budgets `budget` (written again to raise them); its
    dashboard on a free port."""
    return steering_config(tmp_path, [forge], model, budget=budget, dashboard={"bind": "127.0.0.1:0"})


def _budget_comments(forge: GitHubForge, number: int) -> list[str]:
    return [body for author, body in forge.comments("issue", number) if author == BOT and body.startswith(BUDGET_HEADER)]


def _statuses(tmp_path: Path) -> dict[str, list[str]]:
    with agent_store(tmp_path) as store:
        runs: dict[str, list[str]] = {}
        for run in store.runs.all():
            runs.setdefault(run.task_key, []).append(run.status)
        return runs


def _key(number: int) -> str:
    return f"github:{REPO}#{number}"


def test_requester_over_runs_per_day_waits_with_one_comment_and_starts_once_raised(
    github_forge: GitHubForge, tmp_path: Path
) -> None:
    forge = github_forge
    with ReplaySandbox(_task_script("First task", "Second task")) as model:
        setup = _setup(tmp_path, forge, model, per_requester={"runs_per_day": 1})
        first = forge.open_task("issue", "First task", "Do the first thing.")
        assert run_cycle(load_for_service(setup)).errors == ()
        assert "coding agent done" in forge.labels("issue", first)

        second = forge.open_task("issue", "Second task", "Do the second thing.")
        requests = len(model.requests)
        for _ in range(2):  # a second poll does not comment again
            assert run_cycle(load_for_service(setup)).errors == ()
        assert len(model.requests) == requests, "a held task costs no model call"
        assert _key(second) not in _statuses(tmp_path), "a held task starts no run"
        [comment] = _budget_comments(forge, second)
        assert "`budget.per_requester.runs_per_day`" in comment and f"@{MAINTAINER}" in comment
        assert "1 of 1 runs used" in comment and "00:00 UTC" in comment
        assert {"coding agent", PAUSED} <= set(forge.labels("issue", second))

        _setup(tmp_path, forge, model, per_requester={"runs_per_day": 2})
        assert run_cycle(load_for_service(setup)).errors == ()

    assert _statuses(tmp_path)[_key(second)] == ["done"]
    labels = forge.labels("issue", second)
    assert "coding agent done" in labels and PAUSED not in labels
    assert len(_budget_comments(forge, second)) == 1


def test_run_crossing_tokens_per_day_finishes_its_step_pauses_and_resumes_once_raised(
    github_forge: GitHubForge, tmp_path: Path
) -> None:
    forge = github_forge
    with ReplaySandbox({"replies": [dict(step) for step in THREE_FILES]}) as model:
        setup = _setup(tmp_path, forge, model, per_requester={"tokens_per_day": 1})
        number = forge.open_task("issue", "Three files", "Write a, b and c.")
        assert run_cycle(load_for_service(setup)).errors == ()
        assert len(model.requests) == 1, "the step that crossed the budget finished; no next step"
        assert _statuses(tmp_path)[_key(number)] == ["paused"]
        assert PAUSED in forge.labels("issue", number)
        [comment] = _budget_comments(forge, number)
        assert "`budget.per_requester.tokens_per_day`" in comment and "of 1 tokens used" in comment

        assert run_cycle(load_for_service(setup)).errors == ()
        assert len(model.requests) == 1, "a held paused run does not resume"

        _setup(tmp_path, forge, model, per_requester={"tokens_per_day": 10**9})
        assert run_cycle(load_for_service(setup)).errors == ()

    assert len(model.requests) == len(THREE_FILES), "no step is redone after the resume"
    assert _statuses(tmp_path)[_key(number)] == ["done"]
    labels = forge.labels("issue", number)
    assert "coding agent done" in labels and PAUSED not in labels


def test_repository_over_tokens_per_day_holds_its_next_task_until_raised(
    github_forge: GitHubForge, tmp_path: Path
) -> None:
    forge = github_forge
    with ReplaySandbox(_task_script("First task", "Second task")) as model:
        setup = _setup(tmp_path, forge, model)
        first = forge.open_task("issue", "First task", "Do the first thing.")
        assert run_cycle(load_for_service(setup)).errors == ()
        assert "coding agent done" in forge.labels("issue", first)

        _setup(tmp_path, forge, model, per_repository={"tokens_per_day": 1})
        second = forge.open_task("issue", "Second task", "Do the second thing.")
        for _ in range(2):
            assert run_cycle(load_for_service(setup)).errors == ()
        assert _key(second) not in _statuses(tmp_path)
        [comment] = _budget_comments(forge, second)
        assert "`budget.per_repository.tokens_per_day`" in comment and f"the repository github:{REPO}" in comment
        assert PAUSED in forge.labels("issue", second)

        _setup(tmp_path, forge, model, per_repository={"tokens_per_day": 10**9})
        assert run_cycle(load_for_service(setup)).errors == ()

    assert _statuses(tmp_path)[_key(second)] == ["done"]
    assert "coding agent done" in forge.labels("issue", second)


def test_followups_count_toward_the_requester_who_started_the_task(github_forge: GitHubForge, tmp_path: Path) -> None:
    """A follow-up asked by another writer is a run of the starter's task: it counts
    toward the starter, whose next task is then held by `runs_per_day: 2`."""
    forge = github_forge
    forge.sandbox.state.add_user(WRITER)
    forge.sandbox.state.set_permission(REPO, WRITER, "write")
    script = _task_script("also add a README", "First task", "Second task")  # the follow-up's prompt has both
    with ReplaySandbox(script) as model:
        setup = _setup(tmp_path, forge, model, per_requester={"runs_per_day": 2})
        first = forge.open_task("issue", "First task", "Do the first thing.")
        assert run_cycle(load_for_service(setup)).errors == ()
        post_comment(forge, "issue", first, WRITER, f"@{BOT} please also add a README")
        assert run_cycle(load_for_service(setup)).errors == ()
        assert _statuses(tmp_path)[_key(first)] == ["done", "done"], "the follow-up ran"

        second = forge.open_task("issue", "Second task", "Do the second thing.")
        assert run_cycle(load_for_service(setup)).errors == ()
        assert _key(second) not in _statuses(tmp_path)
        [comment] = _budget_comments(forge, second)
        assert f"@{MAINTAINER}" in comment and "2 of 2 runs used" in comment

    usage, pages = asyncio.run(_api_usage(load_for_service(setup), [quote(_key(first), safe="")]))
    budget = usage["requesters"][MAINTAINER]["budget"]
    assert budget["runs_per_day"]["used"] == 2 and budget["runs_per_day"]["left"] == 0
    assert budget["runs_per_day"]["resets_at"].endswith("T00:00:00+00:00")
    assert budget["tokens_per_day"]["used"] > 0 and budget["tokens_per_day"]["limit"] is None
    assert usage["requesters"][WRITER]["budget"]["runs_per_day"]["used"] == 0, "the follow-up's asker is not charged"
    assert usage["repositories"][REPO]["budget"]["tokens_per_day"]["used"] > 0

    # The dashboard shows what is left too: the usage page per requester, and the task page
    # for the requester who started it (only runs_per_day is set: only runs are left).
    assert "0 of 2 runs" in pages["/usage"] and "0 of 2 runs (requester)" in pages[f"/tasks/{quote(_key(first), safe='')}"]

    status = run_cli(setup, "status")
    assert status.returncode == 0, status.stderr
    assert f"requester {MAINTAINER}: tokens_per_day=" in status.stdout
    assert "runs_per_day=2/2 (0 left)" in status.stdout


async def _api_usage(config: AgentConfig, tasks: list[str]) -> tuple[dict[str, Any], dict[str, str]]:
    """`GET /api/usage` of the dashboard over the test's state store, and the HTML of its
    usage page and of the task pages of `tasks` (quoted keys), by path."""
    store = StateStore(config.database.url)
    try:
        async with serving_dashboard(config, store) as url:
            assert url is not None
            async with httpx.AsyncClient(base_url=url) as client:
                response = await client.get("/api/usage")
                pages = {path: (await client.get(path)).text for path in ["/usage", *(f"/tasks/{key}" for key in tasks)]}
        assert response.status_code == 200
        return response.json(), pages
    finally:
        store.close()


def test_followup_over_the_starters_budget_waits_and_runs_once_raised(github_forge: GitHubForge, tmp_path: Path) -> None:
    """Asked by another writer, the follow-up is held by the starter's `runs_per_day`; the
    budget's comment (now the newest word on the task) does not lose the request."""
    forge = github_forge
    forge.sandbox.state.add_user(WRITER)
    forge.sandbox.state.set_permission(REPO, WRITER, "write")
    with ReplaySandbox(_task_script("also add a README", "First task")) as model:
        setup = _setup(tmp_path, forge, model, per_requester={"runs_per_day": 1})
        number = forge.open_task("issue", "First task", "Do the first thing.")
        assert run_cycle(load_for_service(setup)).errors == ()
        post_comment(forge, "issue", number, WRITER, f"@{BOT} please also add a README")
        for _ in range(2):
            assert run_cycle(load_for_service(setup)).errors == ()
        assert _statuses(tmp_path)[_key(number)] == ["done"], "the follow-up is held"
        [comment] = _budget_comments(forge, number)
        assert f"@{MAINTAINER}" in comment and "1 of 1 runs used" in comment
        assert PAUSED in forge.labels("issue", number)

        _setup(tmp_path, forge, model, per_requester={"runs_per_day": 2})
        assert run_cycle(load_for_service(setup)).errors == ()
        assert run_cycle(load_for_service(setup)).errors == ()

    assert _statuses(tmp_path)[_key(number)] == ["done", "done"], "the held follow-up ran, once"
    author, final = forge.comments("issue", number)[-1]
    assert author == BOT and final.startswith("DONE-0"), "the follow-up's own answer"
    labels = forge.labels("issue", number)
    assert "coding agent done" in labels and PAUSED not in labels


def test_a_run_paused_by_its_budget_can_still_be_stopped(github_forge: GitHubForge, tmp_path: Path) -> None:
    forge = github_forge
    with ReplaySandbox({"replies": [dict(step) for step in THREE_FILES]}) as model:
        setup = _setup(tmp_path, forge, model, per_requester={"tokens_per_day": 1})
        number = forge.open_task("issue", "Three files", "Write a, b and c.")
        assert run_cycle(load_for_service(setup)).errors == ()
        assert _statuses(tmp_path)[_key(number)] == ["paused"]

        stopped = run_cli(setup, "stop", _key(number))
        assert stopped.returncode == 0, stopped.stderr

    assert len(model.requests) == 1, "stopping asks the model nothing"
    assert _statuses(tmp_path)[_key(number)] == ["stopped"]
    labels = forge.labels("issue", number)
    assert "coding agent stopped" in labels and PAUSED not in labels


@pytest.fixture(params=["sqlite", "postgresql"])
def database_url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    """Both backends of the state store: the budget check and the claim are one
    transaction on each (SPEC 15, "Spend past a budget")."""
    if request.param == "sqlite":
        yield f"sqlite:///{tmp_path / 'state.db'}"
    else:
        with fresh_postgres_or_skip() as url:
            yield url


def test_four_workers_claiming_four_tasks_at_once_start_one_within_runs_per_day_1(
    github_forge: GitHubForge, tmp_path: Path, database_url: str
) -> None:
    """Four issues labelled at once, `workers: 4`: the four claims run side by side, and
    each would see no run of the day yet if the check came before the claim's record.
    Exactly one starts (and is done); the other three are held, each told once."""
    forge = github_forge
    titles = [f"Task {n}" for n in range(4)]
    with ReplaySandbox(_task_script(*titles)) as model:
        setup = steering_config(
            tmp_path,
            [forge],
            model,
            budget={"per_requester": {"runs_per_day": 1}},
            workers=4,
            database={"url": database_url},
        )
        numbers = [forge.open_task("issue", title, f"Do thing {n}.") for n, title in enumerate(titles)]
        assert run_cycle(load_for_service(setup)).errors == ()

    store = StateStore(database_url)
    try:
        runs = [(run.task_key, run.status) for run in store.runs.all()]
    finally:
        store.close()
    assert len(runs) == 1 and runs[0][1] == "done", runs
    [started] = [number for number in numbers if _key(number) == runs[0][0]]
    assert "coding agent done" in forge.labels("issue", started), "the task within the budget ran"
    for number in numbers:
        if number != started:
            assert PAUSED in forge.labels("issue", number), number
            [comment] = _budget_comments(forge, number)
            assert "1 of 1 runs used" in comment, comment

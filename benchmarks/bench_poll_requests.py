"""Forge requests per poll cycle with 1 and with 50 repositories in scope (target: the same count).

A poll cycle is `AgentService.run_cycle()`: every source's `discover()` plus whatever the
service does with what it found. Each scenario runs against a fresh sandbox forge and
counts the requests in the forge's own request log, per cycle, for two cycles (the
second shows what conditional requests save, if any):

- GitHub, `owner` with a `repos` list of 1 vs 50 entries;
- GitHub, owner-wide (no `repos`), the owner having 1 vs 50 repositories;
- the same as a GitHub App installed on them (SPEC 17: the JWT's mints and the
  installation's repository list, cached and revalidated, not one per task or poll);
- GitLab, a `group` holding 1 vs 50 projects;

each with nothing labelled, and with 3 labelled tasks in scope whose leases another
worker already holds (the cycle must skip them without asking the forge about them).

Run: `python benchmarks/bench_poll_requests.py`
"""

from __future__ import annotations

import asyncio
import tempfile
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import unquote_plus

from _common import emit, open_labelled_issues, seed_github, seed_gitlab

from coding_agent.config import parse_config
from coding_agent.domain.tasks import Forge, TaskKey
from coding_agent.runtime.service import AgentService
from coding_agent.sandbox.github import GitHubSandbox, GitHubState
from coding_agent.store.state import StateStore
from tests.support.github_app import new_app_key
from tests.support.gitlab import GitLabSandbox, GitLabState

OWNER = "acme"
USER = "maintainer"
BOT = "bench-bot"
BOT_TOKEN = "bench-bot-token"
OTHER_WORKER = "another-worker"
LABELLED_TASKS = 3
SIZES = (1, 50)
CYCLES = 2


@dataclass(frozen=True)
class Scenario:
    forge: str
    scope: str
    repositories: int
    leased_tasks: int


def _projects(count: int) -> list[str]:
    return [f"{OWNER}/repo-{index:02d}" for index in range(1, count + 1)]


def _llm_section() -> dict[str, Any]:
    # Never called: nothing is claimed in these cycles.
    return {"provider": "openai", "openai": {"base_url": "http://127.0.0.1:9/v1", "model": "unused", "api_key": "unused"}}


def _config(directory: Path, forge: str, section: dict[str, Any]) -> Any:
    credential = {} if "app" in section else {"token": BOT_TOKEN, "bot_name": BOT}
    data = {
        "task_source": forge,
        forge: {**section, **credential},
        "llm": _llm_section(),
        "workspace": {"base_dir": str(directory / "workspaces")},
        "context_storage": {"base_dir": str(directory / "contexts")},
        "logging": {"dir": str(directory / "logs")},
        "database": {"url": f"sqlite:///{directory / 'state.db'}"},
    }
    return parse_config(data, source="bench_poll_requests", env={})


def _lease_elsewhere(database_url: str, keys: list[TaskKey]) -> None:
    """Another worker holds these tasks: the cycle finds them and must leave them alone."""
    store = StateStore(database_url)
    try:
        for key in keys:
            if not store.leases.acquire_lease(str(key), OTHER_WORKER, 900):
                raise SystemExit(f"could not lease {key} for the other worker")
    finally:
        store.close()


def _seed(state: GitHubState | GitLabState, forge: Forge, projects: list[str], labelled: int) -> list[TaskKey]:
    """Every project with an unlabelled issue; `labelled` trigger-labelled issues spread over them."""
    if isinstance(state, GitHubState):
        seed_github(state, projects, USER, BOT, BOT_TOKEN)
    else:
        seed_gitlab(state, projects, USER, BOT, BOT_TOKEN)
    for project in projects:
        state.create_issue(project, "Not for the agent", "An unlabelled issue.", author=USER)
    return open_labelled_issues(state, forge, projects, labelled, USER)


def _describe(record: Any) -> str:
    """`GET /path?query`, the query decoded: says which listing or search each request was."""
    query = f"?{unquote_plus(record.query)}" if record.query else ""
    return f"{record.method} {record.path}{query}"


async def _cycles(config: Any, requests: Callable[[], list[Any]], clear: Callable[[], None]) -> list[dict[str, Any]]:
    service = AgentService(config)
    cycles = []
    try:
        for _ in range(CYCLES):
            clear()
            report = await service.run_cycle()
            if report.errors or report.results:
                raise SystemExit(f"unexpected cycle outcome: errors={report.errors}, runs={len(report.results)}")
            logged = requests()
            cycles.append(
                {
                    "requests": len(logged),
                    "not_modified_304": sum(1 for record in logged if record.status == 304),
                    "discovered": report.discovered,
                    "by_request": dict(Counter(_describe(record) for record in logged)),
                }
            )
    finally:
        await service.aclose()
    return cycles


def run_scenario(scenario: Scenario) -> dict[str, Any]:
    projects = _projects(scenario.repositories)
    with tempfile.TemporaryDirectory(prefix="bench-poll-") as tmp:
        directory = Path(tmp)
        if scenario.forge in ("github", "github-app"):
            with GitHubSandbox() as github:
                keys = _seed(github.state, "github", projects, scenario.leased_tasks)
                section: dict[str, Any] = {"api_url": github.url, "owner": OWNER}
                if scenario.forge == "github-app":
                    # The same forge, the agent installed as a GitHub App on every repository
                    # (SPEC 17): the mints must not add a request per task per poll.
                    key = new_app_key()
                    app = github.state.add_app("bench-agent", key.public_pem, owner=OWNER)
                    github.state.install_app(app.id, OWNER, projects)
                    section["app"] = {"app_id": app.id, "private_key": key.private_pem}
                if scenario.scope == "owner+repos":
                    section["repos"] = [project.split("/", 1)[1] for project in projects]
                config = _config(directory, "github", section)
                _lease_elsewhere(config.database.url, keys)
                cycles = asyncio.run(_cycles(config, github.state.requests, github.state.clear_requests))
        else:
            with GitLabSandbox() as gitlab:
                keys = _seed(gitlab.state, "gitlab", projects, scenario.leased_tasks)
                config = _config(directory, "gitlab", {"api_url": gitlab.url, "group": OWNER})
                _lease_elsewhere(config.database.url, keys)
                cycles = asyncio.run(_cycles(config, gitlab.state.requests, gitlab.state.clear_requests))
    for cycle in cycles:
        if cycle["discovered"] != scenario.leased_tasks:
            raise SystemExit(f"{scenario}: discovered {cycle['discovered']} tasks, expected {scenario.leased_tasks}")
    return {
        "forge": scenario.forge,
        "scope": scenario.scope,
        "repositories_in_scope": scenario.repositories,
        "labelled_tasks_leased_elsewhere": scenario.leased_tasks,
        "requests_per_cycle": [cycle["requests"] for cycle in cycles],
        "cycles": cycles,
    }


def main() -> None:
    groups = [("github", "owner+repos"), ("github", "owner"), ("github-app", "owner"), ("gitlab", "group")]
    comparisons = []
    for forge, scope in groups:
        for leased in (0, LABELLED_TASKS):
            results = [run_scenario(Scenario(forge, scope, size, leased)) for size in SIZES]
            counts = {str(result["repositories_in_scope"]): result["requests_per_cycle"] for result in results}
            comparisons.append(
                {
                    "forge": forge,
                    "scope": scope,
                    "labelled_tasks_leased_elsewhere": leased,
                    "requests_per_cycle_by_repositories": counts,
                    "same_count": len({tuple(value) for value in counts.values()}) == 1,
                    "scenarios": results,
                }
            )
    emit(
        {
            "benchmark": "poll_requests",
            "what": "forge requests per AgentService.run_cycle() with 1 vs 50 repositories in scope",
            "target": "the same request count with 1 and with 50 repositories",
            "met": all(comparison["same_count"] for comparison in comparisons),
            "comparisons": comparisons,
        }
    )


if __name__ == "__main__":
    main()

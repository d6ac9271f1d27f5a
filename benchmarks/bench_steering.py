"""Forge requests of steering (SPEC 13): per checkpoint when nothing changed, and per run.

Targets: a steering checkpoint costs at most one request that is not a 304; a 20-step
run stays under 40 requests counted against the rate limit.

1. Per checkpoint: a run's real `RunSteering` (pause, stop and comment checks, with the
   assignee read forced at every checkpoint: `min_check_interval_seconds: 0`) on a
   GitHub issue and PR and a GitLab issue and MR of the sandbox forges. After a warm-up
   checkpoint, 20 checkpoints with nothing changed; the sandbox's request log counts
   every request and the ones that were not 304.
2. Per run: a whole 20-step task (19 tool calls, then done) through
   `AgentService.run_cycle`, from the poll to the final label and the draft PR/MR, on
   the sandbox GitHub (default steering settings, and the assignee read at every
   checkpoint) and GitLab (assignees at every checkpoint). Counted = what GitHub counts
   against the rate limit (all but 304s); the git traffic of the clone and the push is
   not REST API and is counted by neither.

Run: `python benchmarks/bench_steering.py`
"""

from __future__ import annotations

import asyncio
import tempfile
from collections import Counter
from pathlib import Path
from typing import Any

from _common import emit

from coding_agent.agent.loop import Checkpoint
from coding_agent.agent.runner import IssueReporter
from coding_agent.agent.steering import RunControls, RunSteering
from coding_agent.config import AgentConfig, parse_config
from coding_agent.context.storage import ContextStorage
from coding_agent.domain.tasks import TaskKey
from coding_agent.llm.factory import create_llm_client
from coding_agent.redaction import Redactor
from coding_agent.retry import RetryPolicy
from coding_agent.runtime.service import AgentService
from coding_agent.sandbox.github import GitHubSandbox
from coding_agent.sandbox.replay_model import ReplaySandbox
from coding_agent.sources.factory import create_sources
from coding_agent.store.state import StateStore
from tests.support.gitlab import GitLabSandbox

REPO = "bench/steer"
BOT = "bench-bot"
GITHUB_TOKEN = "ghp_" + "BenchSteeringToken0123456789abcd"
GITLAB_TOKEN = "glpat-" + "BenchSteeringToken01"
CHECKPOINTS = 20
RUN_STEPS = 20


def _github() -> GitHubSandbox:
    sandbox = GitHubSandbox().start()
    state = sandbox.state
    state.add_user("maintainer")
    state.add_user(BOT, token=GITHUB_TOKEN, bot=True)
    state.add_repo(REPO)
    state.set_permission(REPO, "maintainer", "admin")
    state.set_permission(REPO, BOT, "write")
    return sandbox


def _gitlab() -> GitLabSandbox:
    sandbox = GitLabSandbox().start()
    state = sandbox.state
    state.add_user("maintainer")
    state.add_user(BOT, token=GITLAB_TOKEN, bot=True)
    state.add_group("bench")
    state.add_project(REPO)
    state.set_access(REPO, "maintainer", 40)
    state.set_access(REPO, BOT, 30)
    return sandbox


def _config(directory: Path, github: GitHubSandbox | None, gitlab: GitLabSandbox | None, **extra: Any) -> AgentConfig:
    data: dict[str, Any] = {
        "task_source": [name for name, box in (("github", github), ("gitlab", gitlab)) if box is not None],
        "llm": {"provider": "openai", "openai": {"model": "replay", "base_url": "http://127.0.0.1:9/v1", "api_key": "k"}},
        "workspace": {"base_dir": str(directory / "workspaces")},
        "context_storage": {"base_dir": str(directory / "contexts")},
        "database": {"url": f"sqlite:///{directory / 'state.db'}"},
        "memory": {"enabled": False},
        "retry": {"base_delay_seconds": 0.01},
    }
    if github is not None:
        data["github"] = {"api_url": github.url, "token": GITHUB_TOKEN, "owner": "bench", "bot_name": BOT}
    if gitlab is not None:
        data["gitlab"] = {"api_url": gitlab.url, "token": GITLAB_TOKEN, "group": "bench", "bot_name": BOT}
    data.update(extra)
    return parse_config(data, env={})


async def _checkpoint_costs(directory: Path) -> dict[str, Any]:
    """Requests per idle checkpoint on each forge and kind."""
    github, gitlab = _github(), _gitlab()
    results: dict[str, Any] = {}
    try:
        numbers = {
            "github_issue": github.state.create_issue(REPO, "Issue", "Body", author="maintainer"),
            "github_pr": github.state.create_pull(REPO, "PR", "Body", author="maintainer", head="feature", base="main"),
            "gitlab_issue": gitlab.state.create_issue(REPO, "Issue", "Body", author="maintainer"),
            "gitlab_mr": gitlab.state.create_merge_request(REPO, "MR", "Body", author="maintainer", source_branch="f"),
        }
        for name in ("github_issue", "github_pr"):
            github.state.add_comment(REPO, numbers[name], "maintainer", "An earlier comment.")
            github.state.assign(REPO, numbers[name], BOT, actor="maintainer")
        for name, kind in (("gitlab_issue", "issue"), ("gitlab_mr", "mr")):
            gitlab.state.add_note(REPO, numbers[name], "maintainer", "An earlier comment.", kind=kind)
            gitlab.state.assign(REPO, numbers[name], BOT, actor="maintainer", kind=kind)
        # Measuring the checks, not the progress comment.
        config = _config(
            directory, github, gitlab, task_stop={"min_check_interval_seconds": 0}, progress_comment={"enabled": False}
        )
        sources = {source.forge: source for source in create_sources(config)}
        store = StateStore(config.database.url)
        redactor = Redactor(config.secrets())
        controls = RunControls(config, store, redactor, "bench-owner")
        storage = ContextStorage(config.context_storage.base_dir, redactor)
        llm = create_llm_client(config.llm, RetryPolicy(retries=0))
        llm.send_system_prompt("system")
        llm.send_user_message("task")
        try:
            for name, number in numbers.items():
                forge, kind = name.split("_")
                sandbox: Any = github if forge == "github" else gitlab
                key = TaskKey.parse(f"{forge}:{REPO}{'#' if kind == 'issue' else '!'}{number}")
                source = sources[forge]
                task = await source.get_task(key)
                comments = await source.list_comments(key)
                threads = await source.list_threads(key)
                files = storage.start_run(f"bench-{name}")
                reporter = IssueReporter(source, task, redactor, None, frozenset())
                control = RunSteering(controls, source, task, files, directory / "workspaces" / name, None, reporter, None)
                await control.begin(comments, threads, None)
                await control.checkpoint(Checkpoint.ITERATION_START, llm)  # warm the conditional caches
                control.on_step(1)  # inside iteration 1, where the assignee check is due at every point
                sandbox.state.clear_requests()
                for _ in range(CHECKPOINTS):
                    await control.checkpoint(Checkpoint.AFTER_TOOL, llm)
                requests = sandbox.state.requests()
                statuses = Counter(str(request.status) for request in requests)
                not_304 = sum(1 for request in requests if request.status != 304)
                results[name] = {
                    "checkpoints": CHECKPOINTS,
                    "requests_per_checkpoint": round(len(requests) / CHECKPOINTS, 2),
                    "non_304_per_checkpoint": round(not_304 / CHECKPOINTS, 2),
                    "statuses": dict(statuses),
                    "target_non_304_at_most": 1,
                    "meets_target": not_304 / CHECKPOINTS <= 1,
                }
        finally:
            await llm.aclose()
            for source in sources.values():
                await source.aclose()
            store.close()
    finally:
        github.stop()
        gitlab.stop()
    return results


def _run_script() -> dict[str, Any]:
    steps: list[dict[str, Any]] = [
        {"tool": "workspace/create", "args": {"path": f"f{n}.txt", "content": f"{n}\n"}, "comment": f"Step {n}."}
        for n in range(RUN_STEPS - 1)
    ]
    return {"replies": [*steps, {"done": "Wrote the files."}]}


async def _run_cost(directory: Path, steering: dict[str, Any], forge: str = "github") -> dict[str, Any]:
    """Requests of one whole 20-step run on a sandbox forge, from the poll to the final label."""
    sandbox: Any = _github() if forge == "github" else _gitlab()
    try:
        with ReplaySandbox(_run_script()) as model:
            state = sandbox.state
            number = state.create_issue(REPO, "Twenty steps", "Write the files.", author="maintainer")
            state.assign(REPO, number, BOT, actor="maintainer")
            state.add_label(REPO, number, "coding agent", actor="maintainer")
            github, gitlab = (sandbox, None) if forge == "github" else (None, sandbox)
            config = _config(directory, github, gitlab, **steering)
            config.llm.openai.base_url = model.openai_base_url  # type: ignore[union-attr]
            state.clear_requests()
            service = AgentService(config)
            try:
                report = await service.run_cycle()
            finally:
                await service.aclose()
            requests = state.requests()
            not_304 = [r for r in requests if r.status != 304]
            result: dict[str, Any] = {
                "status": [result.status for result in report.results],
                "steps": [result.steps for result in report.results],
                "requests": len(requests),
                "not_modified_304": len(requests) - len(not_304),
                "not_304": len(not_304),
            }
            if forge == "github":  # GitHub's rate limit: all but 304s (the sandbox counts as GitHub does)
                counted = state.counted_requests()
                result["counted"] = len(counted)
                result["counted_by_route"] = dict(Counter(f"{r.method} {_route(r.path)}" for r in counted).most_common())
                result["target_counted_under"] = 40
                result["meets_target"] = len(counted) < 40
            return result
    finally:
        sandbox.stop()


def _route(path: str) -> str:
    parts = path.strip("/").split("/")
    return "/".join("N" if part.isdigit() else part for part in parts)


async def main() -> None:
    with tempfile.TemporaryDirectory() as temporary:
        root = Path(temporary)
        per_checkpoint = await _checkpoint_costs(root / "checkpoints")
        eager = {"task_stop": {"min_check_interval_seconds": 0}}
        runs = {
            "github_run_20_steps_default_settings": await _run_cost(root / "gh-default", {}),
            "github_run_20_steps_assignees_every_checkpoint": await _run_cost(root / "gh-eager", eager),
            "gitlab_run_20_steps_assignees_every_checkpoint": await _run_cost(root / "gl-eager", eager, "gitlab"),
        }
    emit({"benchmark": "steering_forge_requests", "per_idle_checkpoint": per_checkpoint, **runs})


if __name__ == "__main__":
    asyncio.run(main())

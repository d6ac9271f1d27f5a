"""CI feedback (SPEC 16): what watching costs the forge, and how fast a failure is acted on.

1. Forge requests per watched PR/MR per poll, with 50 watched PRs/MRs whose CI is still
   running (target O(1): at most 2 per PR per poll, fewer with conditional requests). The
   watches are seeded in the state store; each poll is `CiWatcher.poll`, the part of a
   producer cycle that looks at them, counted in the sandbox forge's own request log, for
   two polls (the second shows what conditional requests save). GitHub and GitLab.
2. From a failing check's completion (the sandbox GitHub sends its `check_run`,
   `check_suite` and `workflow_run` webhooks to `serve`) to the fix run's first model
   request, with a free worker and no poll in between (target: under 1 s). The sandbox
   forge and the replay model run in this process, so their work counts in the figure.

Run: `python benchmarks/bench_ci_watch.py`
"""

from __future__ import annotations

import asyncio
import tempfile
import time
from pathlib import Path
from typing import Any

from _common import emit, seed_github, seed_gitlab, summary_ms

from coding_agent.config import AgentConfig, parse_config
from coding_agent.domain.ci import CiWatch, WatchState
from coding_agent.runtime.service import AgentService
from coding_agent.store.state import StateStore
from coding_agent.store.ci_watches import CiWatches
from coding_agent.sandbox.github import GitHubSandbox
from coding_agent.sandbox.replay_model import ReplaySandbox
from coding_agent.web.server import bind_socket, serving_http
from tests.support.gitlab import GitLabSandbox

OWNER = "acme"
REPO = f"{OWNER}/widgets"
USER = "maintainer"
BOT = "bench-bot"
BOT_TOKEN = "bench-bot-token"
SECRET = "bench-webhook-secret"
WATCHED = 50
POLLS = 2
FIXES = 5
CI_TURN = "CI failed on your last push"
BROKEN = "def add(a, b):\n    return a - b\n"
FIXED = "def add(a, b):\n    return a + b\n"


def _config(directory: Path, forge: str, section: dict[str, Any], llm: dict[str, Any], **extra: Any) -> AgentConfig:
    data = {
        "task_source": forge,
        forge: {**section, "token": BOT_TOKEN, "bot_name": BOT},
        "llm": llm,
        "workspace": {"base_dir": str(directory / "workspaces")},
        "context_storage": {"base_dir": str(directory / "contexts")},
        "logging": {"dir": str(directory / "logs")},
        "database": {"url": f"sqlite:///{directory / 'state.db'}"},
        "memory": {"enabled": False},
        "ci": {"enabled": True},
        **extra,
    }
    return parse_config(data, source="bench_ci_watch", env={})


_UNUSED_LLM = {"provider": "openai", "openai": {"base_url": "http://127.0.0.1:9/v1", "model": "unused", "api_key": "x"}}


def _seed_watches(database_url: str, forge: str, shas: list[str]) -> None:
    """One live watch per PR/MR, as a done run's push leaves it."""
    store = StateStore(database_url)
    try:
        watches, now = store.ci_watches, time.time()
        for number, sha in enumerate(shas, start=1):
            key = f"{forge}:{REPO}#{number}"
            branch = f"coding-agent/{number}-x"
            watches.save_watch(CiWatch(key, REPO, number, branch, sha, WatchState.WATCHING, now, now, max_attempts=2))
    finally:
        store.close()


async def _polls(config: AgentConfig, count_requests: Any) -> list[float]:
    """Requests per watched PR/MR in each of `POLLS` polls."""
    service = AgentService(config)
    try:
        assert service.ci is not None
        per_poll = []
        for _ in range(POLLS):
            before = count_requests()
            await service.ci.poll(lambda key: asyncio.sleep(0, result=False))
            per_poll.append(round((count_requests() - before) / WATCHED, 3))
        return per_poll
    finally:
        await service.aclose()


def requests_per_watched_change() -> dict[str, Any]:
    shas = [f"{number:040x}" for number in range(1, WATCHED + 1)]
    results: dict[str, Any] = {}
    with tempfile.TemporaryDirectory() as directory, GitHubSandbox() as github:
        seed_github(github.state, [REPO], USER, BOT, BOT_TOKEN)
        for sha in shas:
            github.state.ci_job(REPO, sha, "tests", conclusion=None)  # still running
        config = _config(Path(directory), "github", {"api_url": github.url, "owner": OWNER}, _UNUSED_LLM)
        _seed_watches(config.database.url, "github", shas)
        results["github"] = asyncio.run(_polls(config, lambda: len(github.state.requests())))
    with tempfile.TemporaryDirectory() as directory, GitLabSandbox() as gitlab:
        gitlab.state.add_group(OWNER)
        seed_gitlab(gitlab.state, [REPO], USER, BOT, BOT_TOKEN)
        for sha in shas:
            gitlab.state.set_ci(REPO, sha, "running")
        config = _config(Path(directory), "gitlab", {"api_url": gitlab.url, "group": OWNER}, _UNUSED_LLM)
        _seed_watches(config.database.url, "gitlab", shas)
        results["gitlab"] = asyncio.run(_polls(config, lambda: len(gitlab.state.requests())))
    return {"watched": WATCHED, "requests_per_watched_per_poll": results}


def _fix_script() -> dict[str, Any]:
    """Each task's own calc.py (so no two tasks push the same commit), and its fix."""
    return {
        "fill": {"task": "Calculator ([0-9]+)"},
        "conversations": [
            {
                "match": CI_TURN,
                "replies": [
                    {"tool": "workspace/create", "args": {"path": "calc.py", "content": f"# {{{{task}}}}\n{FIXED}"}},
                    {"done": "Fixed add()."},
                ],
            }
        ],
        "replies": [
            {"tool": "workspace/create", "args": {"path": "calc.py", "content": f"# {{{{task}}}}\n{BROKEN}"}},
            {"done": "Wrote calc.py."},
        ],
    }


async def _watching(watches: CiWatches, key: str) -> CiWatch:
    """The task's watch once it waits on CI (its run or its fix run pushed)."""
    while (watch := await asyncio.to_thread(watches.watch, key)) is None or watch.state is not WatchState.WATCHING:
        await asyncio.sleep(0.05)
    return watch


async def _webhook_to_fix(github: GitHubSandbox, model: ReplaySandbox, config: AgentConfig) -> list[float]:
    """Seconds from each failing check's completion to its fix run's first model request."""
    state = github.state
    service = AgentService(config)
    stop = asyncio.Event()
    latencies: list[float] = []
    try:
        async with serving_http(config, service, bind_socket("127.0.0.1", 0)) as url:
            assert url is not None and service.ci is not None
            serving = asyncio.create_task(service.serve(stop))
            github.send_webhooks(f"{url}/webhooks/github", SECRET)
            watches = service.store.ci_watches
            keys = [f"github:{REPO}#{number}" for number in range(1, FIXES + 1)]
            for key in keys:  # the first poll's runs, one after the other: not measured
                await _watching(watches, key)
            for key in keys:  # each with every worker free
                sha = (await _watching(watches, key)).sha
                seen = len(model.requests)
                started = time.monotonic()
                await asyncio.to_thread(state.ci_job, REPO, sha, "tests", conclusion="failure", log="FAILED test_add\n")
                while not (fix := [r for r in model.requests[seen:] if CI_TURN in _first_user(r.body)]):
                    await asyncio.sleep(0.005)
                latencies.append(fix[0].received_at - started)
                while (await _watching(watches, key)).sha == sha:
                    await asyncio.sleep(0.05)  # until the fix is pushed and watched
            stop.set()
            await serving
    finally:
        await service.aclose()
    return latencies


def _first_user(body: dict[str, Any]) -> str:
    users = [m for m in body.get("messages", []) if m.get("role") == "user"]
    return str(users[0].get("content")) if users else ""


def webhook_to_fix_run() -> dict[str, Any]:
    with tempfile.TemporaryDirectory() as directory, GitHubSandbox() as github, ReplaySandbox(_fix_script()) as model:
        seed_github(github.state, [REPO], USER, BOT, BOT_TOKEN)
        for index in range(FIXES):
            number = github.state.create_issue(REPO, f"Calculator {index}", "Please add calc.py.", author=USER)
            github.state.add_label(REPO, number, "coding agent", actor=USER)
        llm = {"provider": "openai", "openai": {"base_url": model.openai_base_url, "model": "replay", "api_key": "x"}}
        config = _config(
            Path(directory), "github", {"api_url": github.url, "owner": OWNER}, llm,
            scheduling={"interval_seconds": 3600}, webhooks={"github_secret": SECRET},
            dashboard={"enabled": False},
        )  # fmt: skip
        latencies = asyncio.run(asyncio.wait_for(_webhook_to_fix(github, model, config), 600))
    return {"completion_webhook_to_fix_run_first_request": summary_ms(latencies)}


def main() -> None:
    polls, fixes = requests_per_watched_change(), webhook_to_fix_run()
    most = max(count for counts in polls["requests_per_watched_per_poll"].values() for count in counts)
    median = fixes["completion_webhook_to_fix_run_first_request"]["median_ms"]
    target = {"requests_per_watched_per_poll": "at most 2", "completion_webhook_to_fix_run_first_request": "under 1 s"}
    emit({"benchmark": "ci_watch", **polls, **fixes, "target": target, "met": most <= 2 and median < 1000})


if __name__ == "__main__":
    main()

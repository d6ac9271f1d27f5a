"""Time from the model's `done` to the draft PR being open (target: under 2 s outside the model).

The repository on the sandbox GitHub is real git over smart HTTP: 1,000 files and about
10 MB of history (incompressible content rewritten over many commits), so the default
shallow clone (`workspace.clone_depth: 1`) has something to skip.

Two measurements, each repeated on fresh issues (every iteration a new branch and PR):

- `delivery`: `RunWorkspace.deliver` alone, the package's own work after done: restore
  `.git/config`, `git status`, the bot's and the requester's identities, `git add`,
  `git commit`, `git push`, find-or-open the PR. Broken down by git subcommand and forge
  call. The clone before it (`RunWorkspace.prepare`, shallow) is timed too.
- `run`: a whole task through `AgentService.run_cycle` with a zero-latency replay model
  (the model writes one file, then says done): the time from `run_loop` returning done
  to `open_change` returning the PR. This adds what a real run does in between: closing
  the run's MCP server (the built-in workspace server).

The forge runs in this process (its git work is `git http-backend` subprocesses).

Run: `python benchmarks/bench_delivery.py [--iterations 5] [--files 1000] [--history-mb 10]`
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import functools
import os
import tempfile
import time
from collections import defaultdict
from collections.abc import Callable
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from _common import emit, seed_github, summary_ms

import coding_agent.agent.runner as runner_module
from coding_agent.config import GitHubConfig, WorkspaceConfig, parse_config
from coding_agent.domain.tasks import Task, TaskKey
from coding_agent.redaction import Redactor
from coding_agent.retry import RetryPolicy
from coding_agent.runtime.service import AgentService
from coding_agent.sandbox.github import GitHubSandbox
from coding_agent.sandbox.replay_model import ReplaySandbox
from coding_agent.sources.github import GitHubSource
from coding_agent.workspace.git import Git
from coding_agent.workspace.session import RunWorkspace

TARGET_SECONDS = 2.0
REPO = "bench/delivery"
USER = "maintainer"
BOT = "bench-bot"
BOT_TOKEN = "ghp_" + "BenchDeliveryToken0123456789abcdef"
NOW = datetime.now(timezone.utc)


def _seed_history(sandbox: GitHubSandbox, files: int, history_mb: float) -> dict[str, Any]:
    """1,000 small files, then commits rewriting some of them with random text until the history is big."""
    state = sandbox.state
    seed_github(state, [REPO], USER, BOT, BOT_TOKEN)
    paths = [f"src/pkg{index // 100}/module_{index}.py" for index in range(files)]
    state.init_repo(REPO, files={path: f"VALUE = {index}\n" * 20 for index, path in enumerate(paths)})
    chunk, per_commit = 50_000, 8
    git_dir = state.git_dir(REPO)

    def size() -> int:
        return sum(path.stat().st_size for path in git_dir.rglob("*") if path.is_file())

    commits = 0
    while size() < history_mb * 1_000_000:
        changed = {
            paths[(commits * per_commit + offset) % files]: base64.b64encode(os.urandom(chunk * 3 // 4)).decode()
            for offset in range(per_commit)
        }
        state.git.commit_files(REPO, "main", changed, f"History commit {commits}")
        commits += 1
    return {"files": files, "commits": commits + 1, "repository_bytes_on_forge": size()}


class _Timings:
    """Wall time per labelled part, summed within one iteration."""

    def __init__(self) -> None:
        self.current: dict[str, float] = defaultdict(float)

    def wrap(self, owner: Any, name: str, label: Callable[..., str]) -> None:
        original = getattr(owner, name)

        @functools.wraps(original)
        async def timed(*args: Any, **kwargs: Any) -> Any:
            started = time.perf_counter()
            try:
                return await original(*args, **kwargs)
            finally:
                self.current[label(*args, **kwargs)] += time.perf_counter() - started

        setattr(owner, name, timed)

    def take(self) -> dict[str, float]:
        taken, self.current = dict(self.current), defaultdict(float)
        return taken


def _task(number: int) -> Task:
    return Task(
        key=TaskKey.parse(f"github:{REPO}#{number}"),
        title=f"Benchmark change {number}",
        body="",
        author=USER,
        labels=("coding agent",),
        assignees=(),
        url="",
        created_at=NOW,
        updated_at=NOW,
    )


async def _measure_delivery(sandbox: GitHubSandbox, iterations: int, directory: Path) -> dict[str, Any]:
    timings = _Timings()
    timings.wrap(Git, "run", lambda self, cwd, *args, **kwargs: f"git {args[0]}")
    for method in ("git_identity", "find_open_change", "open_change", "clone_url"):
        timings.wrap(GitHubSource, method, lambda self, *args, _m=method, **kwargs: f"forge {_m}")
    config = GitHubConfig(api_url=sandbox.url, token=BOT_TOKEN, owner="bench", bot_name=BOT)  # type: ignore[arg-type]
    source = GitHubSource(config, RetryPolicy(retries=1, base_delay=0.05))
    redactor = Redactor([BOT_TOKEN])
    clones, deliveries, parts = [], [], defaultdict(list)
    try:
        for iteration in range(iterations):
            number = sandbox.state.create_issue(REPO, f"Benchmark change {iteration}", author=USER)
            path = directory / f"delivery-{iteration}"
            run = RunWorkspace(
                source, _task(number), path, WorkspaceConfig(), RetryPolicy(retries=1), redactor, directory / f"{iteration}.json"
            )
            started = time.perf_counter()
            await run.prepare()
            clones.append(time.perf_counter() - started)
            timings.take()
            (path / "src" / "pkg0" / "module_0.py").write_text("VALUE = 'changed by the benchmark'\n")
            (path / "NEW_FILE.md").write_text(f"Added in iteration {iteration}\n")
            started = time.perf_counter()
            await run.deliver("Changed module_0 and added NEW_FILE.md.", USER, f"bench-{iteration}", "en")
            deliveries.append(time.perf_counter() - started)
            assert run.delivery is not None and run.delivery.action == "opened"
            for label, seconds in timings.take().items():
                parts[label].append(seconds)
    finally:
        await source.aclose()
    return {
        "clone_shallow": summary_ms(clones),
        "done_to_pr_open": summary_ms(deliveries),
        "breakdown_median_ms": {label: summary_ms(values)["median_ms"] for label, values in sorted(parts.items())},
    }


def _measure_run(sandbox: GitHubSandbox, iterations: int, directory: Path) -> dict[str, Any]:
    """done -> PR open inside a real run: `run_loop` returning to `open_change` returning."""
    marks: dict[str, float] = {}
    original_loop = runner_module.run_loop

    async def loop(*args: Any, **kwargs: Any) -> Any:
        outcome = await original_loop(*args, **kwargs)
        marks["done"] = time.perf_counter()
        return outcome

    original_open = GitHubSource.open_change

    async def open_change(self: GitHubSource, *args: Any, **kwargs: Any) -> Any:
        change = await original_open(self, *args, **kwargs)
        marks["pr_open"] = time.perf_counter()
        return change

    runner_module.run_loop = loop  # type: ignore[assignment]
    GitHubSource.open_change = open_change  # type: ignore[method-assign]
    script = {
        "replies": [
            {"tool": "workspace/create", "args": {"path": "hello.txt", "content": "hello\n"}},
            {"done": "Wrote hello.txt."},
        ]
    }
    spans = []
    with ReplaySandbox(script) as model:
        config = parse_config(
            {
                "task_source": "github",
                "github": {"api_url": sandbox.url, "token": BOT_TOKEN, "owner": "bench", "bot_name": BOT},
                "llm": {
                    "provider": "openai",
                    "openai": {"base_url": model.openai_base_url, "model": "replay", "api_key": "bench-key"},
                },
                "workspace": {"base_dir": str(directory / "workspaces")},
                "context_storage": {"base_dir": str(directory / "contexts")},
                "logging": {"dir": str(directory / "logs")},
                "database": {"url": f"sqlite:///{directory / 'state.db'}"},
            },
            env={},
        )
        for iteration in range(iterations):
            number = sandbox.state.create_issue(REPO, f"Run {iteration}: add hello", author=USER)
            sandbox.state.add_label(REPO, number, "coding agent", actor=USER)
            marks.clear()
            results = asyncio.run(_run_cycle(config)).results
            assert [result.status for result in results] == ["done"], results
            spans.append(marks["pr_open"] - marks["done"])
    return {"done_to_pr_open": summary_ms(spans)}


async def _run_cycle(config: Any) -> Any:
    service = AgentService(config)
    try:
        return await service.run_cycle()
    finally:
        await service.aclose()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--iterations", type=int, default=5)
    parser.add_argument("--files", type=int, default=1000)
    parser.add_argument("--history-mb", type=float, default=10.0)
    options = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="bench-delivery-") as temp, GitHubSandbox() as sandbox:
        directory = Path(temp)
        started = time.perf_counter()
        repository = _seed_history(sandbox, options.files, options.history_mb)
        repository["seed_seconds"] = round(time.perf_counter() - started, 2)
        delivery = asyncio.run(_measure_delivery(sandbox, options.iterations, directory))
        run = _measure_run(sandbox, options.iterations, directory)
    worst_median = max(delivery["done_to_pr_open"]["median_ms"], run["done_to_pr_open"]["median_ms"]) / 1000
    emit(
        {
            "benchmark": "delivery",
            "repository": repository,
            "clone_depth": WorkspaceConfig().clone_depth,
            "delivery": delivery,
            "run": run,
            "target": f"done -> PR open median < {TARGET_SECONDS:g} s",
            "met": worst_median < TARGET_SECONDS,
        }
    )


if __name__ == "__main__":
    main()

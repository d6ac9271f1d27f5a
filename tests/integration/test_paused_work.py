"""A pause's work on the task's branch (`workspace/wip.py`) against the sandbox GitHub.

Real clones, commits and pushes over smart HTTP with the bot's token. Three machines
are three workspace roots sharing one checkout record, as workers on three hosts share
the run's context directory.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from datetime import datetime, timezone
from pathlib import Path

import pytest
from pydantic import SecretStr

from coding_agent.config import GitHubConfig
from coding_agent.domain.runs import PausedWork
from coding_agent.domain.tasks import Task, TaskKey
from coding_agent.errors import AgentError
from coding_agent.retry import RetryPolicy
from coding_agent.sandbox.git_http import git_client
from coding_agent.sandbox.github import GitHubSandbox
from coding_agent.sources.github import GitHubSource
from coding_agent.workspace.checkout import prepare_workspace
from coding_agent.workspace.git import Git
from coding_agent.workspace.wip import restore_paused_work, save_paused_work

REPO = "acme/widgets"
BOT_TOKEN = "ghp_" + "PausedWorkBotToken0123456789abcdef"
FAST = RetryPolicy(retries=2, base_delay=0.01, max_delay=0.05)
NOW = datetime(2025, 1, 1, tzinfo=timezone.utc)
TASK = Task(
    key=TaskKey.parse(f"github:{REPO}#1"),
    title="Add notes",
    body="",
    author="alice",
    labels=("coding agent",),
    assignees=(),
    url=f"https://example.test/{REPO}/1",
    created_at=NOW,
    updated_at=NOW,
)


@pytest.fixture
def sandbox() -> Iterator[GitHubSandbox]:
    with GitHubSandbox() as box:
        state = box.state
        state.add_user("alice")
        state.add_user("agent-bot", token=BOT_TOKEN, bot=True)
        state.add_repo(REPO)
        state.set_permission(REPO, "agent-bot", "write")
        state.init_repo(REPO, files={"README.md": "# widgets\n"})
        yield box


@pytest.fixture
async def source(sandbox: GitHubSandbox) -> AsyncIterator[GitHubSource]:
    config = GitHubConfig(api_url=sandbox.url, token=SecretStr(BOT_TOKEN), owner="acme", bot_name="agent-bot")
    github = GitHubSource(config, FAST)
    yield github
    await github.aclose()


def _head(path: Path) -> str:
    git_dir = Path(f"{path.parent}.git-dirs") / path.name
    return git_client(None, f"--git-dir={git_dir}", "rev-parse", "HEAD").stdout.strip()


async def test_nothing_changed_pushes_nothing(sandbox: GitHubSandbox, source: GitHubSource, tmp_path: Path) -> None:
    git, record, path = Git(timeout=60), tmp_path / "checkout.json", tmp_path / "a" / "run"
    checkout = await prepare_workspace(source, TASK, path, git, depth=1, retry=FAST, record=record)

    work = await save_paused_work(source, TASK, checkout, git, run_uuid="run-1", steps=1, retry=FAST)

    assert work == PausedWork(checkout.branch, checkout.start_sha, pushed=False)
    assert set(sandbox.state.branches(REPO)) == {"main"}, "no branch without work"
    elsewhere = tmp_path / "b" / "run"
    restored = await restore_paused_work(source, elsewhere, record, git, work, depth=1, retry=FAST)
    assert restored.branch == checkout.branch and _head(elsewhere) == checkout.start_sha


async def test_a_stale_clone_is_replaced_and_a_moved_branch_still_finds_the_commit(
    sandbox: GitHubSandbox, source: GitHubSource, tmp_path: Path
) -> None:
    git, record = Git(timeout=60), tmp_path / "checkout.json"
    on_a, on_b, on_c = (tmp_path / machine / "run" for machine in ("a", "b", "c"))
    checkout = await prepare_workspace(source, TASK, on_a, git, depth=1, retry=FAST, record=record)
    (on_a / "notes.txt").write_text("from A\n")
    first = await save_paused_work(source, TASK, checkout, git, run_uuid="run-1", steps=1, retry=FAST)
    assert first.pushed and sandbox.state.branches(REPO)[first.branch] == first.commit

    # Machine B resumes, works on, and pauses again.
    at_b = await restore_paused_work(source, on_b, record, git, first, depth=1, retry=FAST)
    assert (on_b / "notes.txt").read_text() == "from A\n" and _head(on_b) == first.commit
    (on_b / "more.txt").write_text("from B\n")
    second = await save_paused_work(source, TASK, at_b, git, run_uuid="run-1", steps=2, retry=FAST)
    assert second.pushed and second.commit != first.commit

    # Back on A: its clone is stale (at the first pause) and is replaced.
    await restore_paused_work(source, on_a, record, git, second, depth=1, retry=FAST)
    assert _head(on_a) == second.commit and (on_a / "more.txt").read_text() == "from B\n"

    # Someone pushed on top of the branch meanwhile: the paused commit is fetched by id.
    sandbox.state.git.commit_files(REPO, second.branch, {"human.txt": "later\n"}, "A person's commit")
    await restore_paused_work(source, on_c, record, git, second, depth=1, retry=FAST)
    assert _head(on_c) == second.commit and not (on_c / "human.txt").exists()


async def test_a_refused_push_keeps_the_work_on_this_machine_only(
    sandbox: GitHubSandbox, source: GitHubSource, tmp_path: Path
) -> None:
    git, record, path = Git(timeout=60), tmp_path / "checkout.json", tmp_path / "a" / "run"
    checkout = await prepare_workspace(source, TASK, path, git, depth=1, retry=FAST, record=record)
    (path / "notes.txt").write_text("from A\n")
    sandbox.state.set_permission(REPO, "agent-bot", "read")  # the push is refused (403)

    work = await save_paused_work(source, TASK, checkout, git, run_uuid="run-1", steps=1, retry=FAST)

    assert not work.pushed and work.commit is not None and work.commit != checkout.start_sha
    assert set(sandbox.state.branches(REPO)) == {"main"}
    again = await restore_paused_work(source, path, record, git, work, depth=1, retry=FAST)
    assert again.branch == checkout.branch and (path / "notes.txt").read_text() == "from A\n", "this machine resumes"
    with pytest.raises(AgentError, match="is not on the forge"):
        await restore_paused_work(source, tmp_path / "b" / "run", record, git, work, depth=1, retry=FAST)

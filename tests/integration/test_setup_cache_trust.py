"""Who may fill the setup cache, and how a repository is named in its key (SPEC 15).

`head_is_trusted` and `repository_id` against the sandbox GitHub and GitLab over real
HTTP, through the real sources: the PR/MR snapshots are the ones a run works from.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator

import pytest
from pydantic import SecretStr

from coding_agent.agent.trust import head_is_trusted
from coding_agent.config import GitHubConfig, GitLabConfig
from coding_agent.domain.tasks import TaskKey, TaskKind
from coding_agent.retry import RetryPolicy
from coding_agent.sandbox.github import GitHubSandbox
from coding_agent.sources.github import GitHubSource
from coding_agent.sources.gitlab import GitLabSource
from tests.support.gitlab import DEVELOPER, REPORTER, GitLabSandbox

REPO = "acme/widgets"
BOT = "coding-bot"
BOT_TOKEN = "sandbox-bot-4f1c9e27d3"


@pytest.fixture
def github() -> Iterator[GitHubSandbox]:
    with GitHubSandbox() as box:
        state = box.state
        state.add_user(BOT, token=BOT_TOKEN, bot=True)
        state.add_repo(REPO)
        state.add_repo("acme/gadgets")
        state.add_repo("mallory/widgets")  # mallory's fork, which only she pushes to
        state.set_permission(REPO, "alice", "write")
        state.set_permission(REPO, "mallory", "write")
        state.set_permission(REPO, "rita", "read")
        state.set_permission(REPO, BOT, "write")
        yield box


@pytest.fixture
async def github_source(github: GitHubSandbox) -> AsyncIterator[GitHubSource]:
    config = GitHubConfig(api_url=github.url, token=SecretStr(BOT_TOKEN), owner="acme", bot_name=BOT)
    source = GitHubSource(config, RetryPolicy(base_delay=0.01))
    yield source
    await source.aclose()


async def test_github_heads_in_the_repository_by_writers_are_trusted_forks_and_readers_are_not(
    github: GitHubSandbox, github_source: GitHubSource
) -> None:
    state = github.state
    issue = state.create_issue(REPO, "An issue", "body", author="rita")
    by_writer = state.create_pull(REPO, "Writer", "", author="alice", head="alice-branch")
    by_reader = state.create_pull(REPO, "Reader", "", author="rita", head="rita-branch")
    from_fork = state.create_pull(REPO, "Fork", "", author="mallory", head="main", head_owner="mallory")

    async def trusted(kind: TaskKind, number: int, writers: frozenset[str] = frozenset()) -> bool:
        task = await github_source.get_task(TaskKey("github", REPO, kind, number))
        return await head_is_trusted(github_source, task, writers)

    assert await trusted(TaskKind.ISSUE, issue), "an issue's clone is the repository's own"
    assert await trusted(TaskKind.CHANGE, by_writer)
    assert await trusted(TaskKind.CHANGE, by_writer, frozenset({"alice"}))
    assert not await trusted(TaskKind.CHANGE, by_reader), "a reader's head"
    assert not await trusted(TaskKind.CHANGE, from_fork), "a fork's head, though its owner has write access"


async def test_github_repository_id_names_the_forge_and_the_repository_not_its_name(
    github: GitHubSandbox, github_source: GitHubSource
) -> None:
    widgets, gadgets = await github_source.repository_id(REPO), await github_source.repository_id("acme/gadgets")
    assert widgets != gadgets
    assert widgets == f"github {github.url.rstrip('/')} {github.state.repo(REPO).id}"


@pytest.fixture
def gitlab() -> Iterator[GitLabSandbox]:
    with GitLabSandbox() as box:
        state = box.state
        state.add_user(BOT, token=BOT_TOKEN, bot=True)
        for name in ("dora", "reed"):
            state.add_user(name)
        state.add_group("team")
        state.add_project("team/app")
        state.set_access("team/app", "dora", DEVELOPER)
        state.set_access("team/app", "reed", REPORTER)
        state.set_access("team/app", BOT, DEVELOPER)
        yield box


async def test_gitlab_merge_requests_by_developers_are_trusted_by_reporters_not(gitlab: GitLabSandbox) -> None:
    config = GitLabConfig(api_url=gitlab.url + "/api/v4", token=SecretStr(BOT_TOKEN), group="team", bot_name=BOT)
    source = GitLabSource(config, RetryPolicy(base_delay=0.01))
    try:
        by_developer = gitlab.state.create_merge_request("team/app", "Dev", "", author="dora", source_branch="dev")
        by_reporter = gitlab.state.create_merge_request("team/app", "Rep", "", author="reed", source_branch="rep")
        keys = [TaskKey("gitlab", "team/app", TaskKind.CHANGE, number) for number in (by_developer, by_reporter)]
        tasks = [await source.get_task(key) for key in keys]
        assert [await head_is_trusted(source, task) for task in tasks] == [True, False]
        identity = await source.repository_id("team/app")
        assert identity.startswith(f"gitlab {gitlab.url.rstrip('/')} ") and identity.split()[-1].isdigit()
    finally:
        await source.aclose()

"""The delivery half of the Source protocol, for both adapters against their sandbox forges.

Clone URLs, the git credential header, commit identities, finding/opening/updating a
PR or MR, and replying inside a review thread / MR discussion, over real HTTP.
"""

from __future__ import annotations

import asyncio
import base64
from collections.abc import AsyncIterator, Iterator

import pytest
from pydantic import SecretStr

from coding_agent.config import GitHubConfig, GitLabConfig
from coding_agent.domain.tasks import TaskKey
from coding_agent.errors import ForgeError
from coding_agent.retry import RetryPolicy
from coding_agent.sandbox.faults import Fault
from coding_agent.sandbox.github import GitHubSandbox
from coding_agent.sources.github import GitHubSource
from coding_agent.sources.gitlab import GitLabSource
from tests.support.gitlab import DEVELOPER, MAINTAINER, GitLabSandbox

REPO = "acme/widgets"
GITHUB_TOKEN = "ghp_" + "SourcesBotToken0123456789abcdefgh"
GITLAB_TOKEN = "glpat-" + "SourcesBotToken0123"
FAST = RetryPolicy(retries=1, base_delay=0.01, max_delay=0.05)


@pytest.fixture
def github() -> Iterator[GitHubSandbox]:
    with GitHubSandbox() as sandbox:
        state = sandbox.state
        state.add_user("alice", name="Alice Liddell", email="alice@example.test")
        state.add_user("bob")
        state.add_user("agent-bot", token=GITHUB_TOKEN, bot=True, name="Agent Bot")
        state.add_repo(REPO)
        state.set_permission(REPO, "agent-bot", "write")
        yield sandbox


@pytest.fixture
def gitlab() -> Iterator[GitLabSandbox]:
    with GitLabSandbox() as sandbox:
        state = sandbox.state
        state.add_user("alice", name="Alice Liddell")
        state.add_user("agent-bot", token=GITLAB_TOKEN, bot=True, name="Agent Bot")
        state.add_project(REPO)
        state.set_access(REPO, "alice", MAINTAINER)
        state.set_access(REPO, "agent-bot", DEVELOPER)
        yield sandbox


def _source(sandbox: GitHubSandbox | GitLabSandbox) -> GitHubSource | GitLabSource:
    if isinstance(sandbox, GitHubSandbox):
        return GitHubSource(GitHubConfig(api_url=sandbox.url, token=SecretStr(GITHUB_TOKEN), owner="acme"), FAST)
    return GitLabSource(GitLabConfig(api_url=sandbox.url, token=SecretStr(GITLAB_TOKEN), group="acme"), FAST)


@pytest.fixture
async def github_source(github: GitHubSandbox) -> AsyncIterator[GitHubSource]:
    source = _source(github)
    yield source  # type: ignore[misc]
    await source.aclose()


@pytest.fixture
async def gitlab_source(gitlab: GitLabSandbox) -> AsyncIterator[GitLabSource]:
    source = _source(gitlab)
    yield source  # type: ignore[misc]
    await source.aclose()


def _basic_password(header: str | None) -> str:
    assert header is not None and header.startswith("Authorization: Basic ")
    return base64.b64decode(header.removeprefix("Authorization: Basic ")).decode().split(":", 1)[1]


async def test_github_clone_url_auth_and_identities(github: GitHubSandbox, github_source: GitHubSource) -> None:
    assert await github_source.clone_url(REPO) == f"{github.url}/{REPO}.git"
    assert _basic_password(github_source.git_http_auth()) == GITHUB_TOKEN

    bot = await github_source.git_identity(None)
    alice = await github_source.git_identity("alice")
    bob = await github_source.git_identity("bob")

    bot_id, bob_id = github.state.user("agent-bot").id, github.state.user("bob").id
    assert str(bot) == f"Agent Bot <{bot_id}+agent-bot@users.noreply.127.0.0.1>"
    assert str(alice) == "Alice Liddell <alice@example.test>"
    assert str(bob) == f"bob <{bob_id}+bob@users.noreply.127.0.0.1>", "no public email: the no-reply address"
    no_token = GitHubSource(GitHubConfig(api_url=github.url, owner="acme"), FAST)
    assert no_token.git_http_auth() is None
    await no_token.aclose()


def _gets(sandbox: GitHubSandbox | GitLabSandbox, path: str) -> int:
    """How many GETs of exactly `path` (GitLab's without its /api/v4 prefix) the forge answered."""
    return sum(r.method == "GET" and r.path.removeprefix("/api/v4") == path for r in sandbox.state.requests())


@pytest.mark.parametrize("forge", ["github", "gitlab"])
async def test_clone_url_and_bot_identity_are_asked_once_per_source(forge: str, request: pytest.FixtureRequest) -> None:
    sandbox = request.getfixturevalue(forge)
    source = _source(sandbox)
    repository = f"/repos/{REPO}" if forge == "github" else f"/projects/{REPO}"
    profile = "/users/alice" if forge == "github" else "/users"
    try:
        together = await asyncio.gather(source.clone_url(REPO), source.clone_url(REPO))
        later = await source.clone_url(REPO)
        bots = [await source.git_identity(None), await source.git_identity(None)]
        alices = [await source.git_identity("alice"), await source.git_identity("alice")]
    finally:
        await source.aclose()

    assert together == [later, later] and later == f"{sandbox.url}/{REPO}.git"
    assert _gets(sandbox, repository) == 1, "runs starting together share the one request"
    assert bots[0] == bots[1] and _gets(sandbox, "/user") == 1
    assert alices[0] == alices[1] and _gets(sandbox, profile) == 2, "other people's profiles are read each time"


@pytest.mark.parametrize("forge", ["github", "gitlab"])
async def test_a_failed_clone_url_is_asked_again(forge: str, request: pytest.FixtureRequest) -> None:
    sandbox = request.getfixturevalue(forge)
    source = _source(sandbox)
    repository = f"/repos/{REPO}" if forge == "github" else f"/projects/{REPO}"
    sandbox.faults.add(Fault(pattern=f"GET (/api/v4)?{repository}$", count=1, status=404))
    try:
        with pytest.raises(ForgeError):
            await source.clone_url(REPO)
        url = await source.clone_url(REPO)
    finally:
        await source.aclose()

    assert url == f"{sandbox.url}/{REPO}.git" and _gets(sandbox, repository) == 2


@pytest.mark.parametrize("forge", ["github", "gitlab"])
async def test_open_find_and_update_a_draft_change(forge: str, request: pytest.FixtureRequest) -> None:
    sandbox = request.getfixturevalue(forge)
    source = _source(sandbox)
    sandbox.state.create_branch(REPO, "coding-agent/1-x")
    try:
        assert await source.find_open_change(REPO, "coding-agent/1-x") is None
        opened = await source.open_change(REPO, "coding-agent/1-x", "main", "Do x", "Closes #1")
        found = await source.find_open_change(REPO, "coding-agent/1-x")
        updated = await source.update_change(REPO, opened.number, "Closes #1\n\nnew summary")
        with pytest.raises(ForgeError, match="422" if forge == "github" else "400"):
            await source.open_change(REPO, "no-such-branch", "main", "T", "")
    finally:
        await source.aclose()

    if forge == "github":
        stored = sandbox.state.issue(REPO, opened.number)
        title, body, url = stored.title, stored.body, f"/{REPO}/pull/{opened.number}"
    else:
        stored = sandbox.state.merge_request(REPO, opened.number)
        title, body, url = stored.title, stored.description, f"/{REPO}/-/merge_requests/{opened.number}"
    assert opened.draft and opened.head_branch == "coding-agent/1-x" and opened.base_branch == "main"
    assert title == ("Do x" if forge == "github" else "Draft: Do x") and opened.url.endswith(url)
    assert found is not None and found.number == opened.number
    assert updated.body.endswith("new summary") and body == updated.body


async def test_github_reply_lands_in_the_review_thread(github: GitHubSandbox, github_source: GitHubSource) -> None:
    number = github.state.create_pull(REPO, "PR", author="alice", head="feature")
    root = github.state.add_review_comment(REPO, number, "alice", "rename this", "src/app.py", 3)
    key = TaskKey.parse(f"github:{REPO}!{number}")

    reply = await github_source.reply_in_thread(key, str(root), "renamed")

    [thread] = await github_source.list_threads(key)
    assert thread.id == str(root) and [c.body for c in thread.comments] == ["rename this", "renamed"]
    assert reply.thread_id == str(root) and reply.author == "agent-bot"


async def test_gitlab_clone_url_auth_and_identities(gitlab: GitLabSandbox, gitlab_source: GitLabSource) -> None:
    assert await gitlab_source.clone_url(REPO) == f"{gitlab.url}/{REPO}.git"
    assert _basic_password(gitlab_source.git_http_auth()) == GITLAB_TOKEN

    bot = await gitlab_source.git_identity(None)
    alice = await gitlab_source.git_identity("alice")

    alice_id = gitlab.state.require_user("alice").id
    assert str(bot) == "Agent Bot <agent-bot@example.test>"
    assert str(alice) == f"Alice Liddell <{alice_id}-alice@users.noreply.127.0.0.1>"
    with pytest.raises(ForgeError, match="nobody"):
        await gitlab_source.git_identity("nobody")


async def test_gitlab_reply_lands_in_the_discussion(gitlab: GitLabSandbox, gitlab_source: GitLabSource) -> None:
    iid = gitlab.state.create_merge_request(REPO, "MR", author="alice", source_branch="feature")
    discussion = gitlab.state.add_discussion(REPO, iid, "alice", "rename this")
    key = TaskKey.parse(f"gitlab:{REPO}!{iid}")

    reply = await gitlab_source.reply_in_thread(key, discussion, "renamed")

    [thread] = await gitlab_source.list_threads(key)
    assert thread.id == discussion and [c.body for c in thread.comments] == ["rename this", "renamed"]
    assert reply.thread_id == discussion and reply.author == "agent-bot"

"""Every path segment the sources send to a forge is one segment (SPEC 15): a repository
that is not canonical is refused before any request, and a login, a sha or a label is
quoted, so a `..` or a `/` in it cannot make the HTTP client resolve the URL to another
repository or endpoint. Over real HTTP to the GitHub testing server."""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Iterator

import pytest
from pydantic import SecretStr

from coding_agent.config import GitHubConfig
from coding_agent.domain.tasks import Permission, TaskKey, TaskKind
from coding_agent.errors import ForgeError
from coding_agent.retry import RetryPolicy
from coding_agent.sandbox.github import GitHubSandbox
from coding_agent.sources.github import GitHubSource
from coding_agent.sources.gitlab.mapping import project_ref

TOKEN = "ghp-" + "segments0123456789abcdef"
REPO = "acme/widgets"


@pytest.fixture
def sandbox() -> Iterator[GitHubSandbox]:
    with GitHubSandbox() as box:
        box.state.add_user("alice")
        box.state.add_user("coding-bot", token=TOKEN, bot=True)
        box.state.add_repo(REPO)
        box.state.add_repo("evil/x")
        box.state.set_permission(REPO, "coding-bot", "write")
        box.state.set_permission("evil/x", "coding-bot", "admin")
        yield box


@pytest.fixture
async def source(sandbox: GitHubSandbox) -> AsyncIterator[GitHubSource]:
    config = GitHubConfig.model_validate({"api_url": sandbox.url, "token": SecretStr(TOKEN), "owner": "acme"})
    github = GitHubSource(config, RetryPolicy(base_delay=0.01))
    yield github
    await github.aclose()


@pytest.mark.parametrize("project", ["acme/../evil/x", "acme/..", "acme/x%2F..", "acme/../../evil"])
async def test_a_repository_that_is_not_canonical_is_refused_before_any_request(
    sandbox: GitHubSandbox, source: GitHubSource, project: str
) -> None:
    with pytest.raises(ForgeError, match="(?i)not a canonical github repository"):
        await source.ci_report(project, "a" * 40)
    with pytest.raises(ForgeError, match="(?i)not a canonical github repository"):
        await source.read_default_branch_file(project, ".coding-agent/setup.sh")
    assert sandbox.state.requests() == []


async def test_a_login_with_dot_segments_stays_one_path_segment(sandbox: GitHubSandbox, source: GitHubSource) -> None:
    key = TaskKey("github", REPO, TaskKind.ISSUE, sandbox.state.create_issue(REPO, "t", "b", author="alice"))
    sandbox.state.clear_requests()
    permission = await source.get_permission(key, "../../evil/x/collaborators/coding-bot")
    assert permission is Permission.NONE
    paths = [request.path for request in sandbox.state.requests()]
    assert paths and all(path.startswith(f"/repos/{REPO}/collaborators/") for path in paths), paths


@pytest.mark.parametrize("path", ["acme/../evil/x", "acme/sub/..", "acme/%2e%2e/x"])
def test_a_gitlab_project_path_that_is_not_canonical_is_no_project_reference(path: str) -> None:
    with pytest.raises(ForgeError, match="(?i)not a canonical gitlab (repository|project)"):
        project_ref(path)
    assert project_ref("acme/sub/widgets") == "acme%2Fsub%2Fwidgets" and project_ref("42") == "42"


async def test_a_polled_item_of_a_repository_that_is_not_canonical_is_skipped_with_one_line(
    sandbox: GitHubSandbox, source: GitHubSource, caplog: pytest.LogCaptureFixture
) -> None:
    """The poll builds keys from the forge's answers: a name no key may hold is left out
    (one log line naming it), and the poll goes on with the others."""
    state = sandbox.state
    weird = "acme/we%2Fird"
    state.add_repo(weird)
    for repo in (weird, REPO):
        state.set_permission(repo, "coding-bot", "write")
        number = state.create_issue(repo, "t", "b", author="alice")
        state.add_label(repo, number, "coding agent", actor="alice")
    with caplog.at_level(logging.INFO):
        tasks = await source.discover()
    assert [task.key.project for task in tasks] == [REPO]
    assert len([r for r in caplog.records if repr(weird) in r.getMessage()]) == 1, caplog.text


async def test_a_polled_gitlab_item_of_a_project_that_is_not_canonical_is_skipped_with_one_line(
    caplog: pytest.LogCaptureFixture,
) -> None:
    from coding_agent.config import GitLabConfig
    from coding_agent.sources.gitlab import GitLabSource
    from tests.support.gitlab import GitLabSandbox

    token = "glpat-" + "segments0123456789"
    with GitLabSandbox() as sandbox:
        state = sandbox.state
        state.add_user("agent-bot", token=token, bot=True)
        state.add_user("alice")
        weird = "team/we%2Fird"
        for project in ("team/app", weird):
            state.add_project(project)
            state.create_issue(project, "t", author="alice", labels=["coding agent"])
        config = GitLabConfig(api_url=sandbox.url + "/api/v4", token=token, bot_name="agent-bot", group="team")
        source = GitLabSource(config, RetryPolicy(base_delay=0.01))
        try:
            with caplog.at_level(logging.INFO):
                tasks = await source.discover()
        finally:
            await source.aclose()
    assert [task.key.project for task in tasks] == ["team/app"]
    assert len([r for r in caplog.records if repr(weird) in r.getMessage()]) == 1, caplog.text

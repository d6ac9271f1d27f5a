"""`read_default_branch_file` for both adapters (SPEC 7.1): the setup script comes from the
default branch through the API, never from a PR/MR head branch."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from pydantic import SecretStr

from coding_agent.config import GitHubConfig, GitLabConfig
from coding_agent.retry import RetryPolicy
from coding_agent.sandbox.github import GitHubSandbox
from coding_agent.sources.github import GitHubSource
from coding_agent.sources.gitlab import GitLabSource
from tests.support.gitlab import DEVELOPER, GitLabSandbox

REPO = "acme/widgets"
GITHUB_TOKEN = "ghp_" + "SetupFilesToken0123456789abcdefghi"
GITLAB_TOKEN = "glpat-" + "SetupFilesToken0123"
FAST = RetryPolicy(retries=1, base_delay=0.01, max_delay=0.05)
SCRIPT = ".coding-agent/setup.sh"


@pytest.fixture(params=["github", "gitlab"])
def source(request: pytest.FixtureRequest) -> Iterator[GitHubSource | GitLabSource]:
    if request.param == "github":
        with GitHubSandbox() as github:
            github.state.add_user("agent-bot", token=GITHUB_TOKEN, bot=True)
            github.state.add_repo(REPO)
            github.state.set_permission(REPO, "agent-bot", "write")
            github.state.init_repo(REPO, {SCRIPT: "echo default\n", "README.md": "hi\n"})
            github.state.create_branch(REPO, "pr-head")
            github.state.git.commit_files(REPO, "pr-head", {SCRIPT: "echo evil\n"})
            yield GitHubSource(GitHubConfig(api_url=github.url, token=SecretStr(GITHUB_TOKEN), owner="acme"), FAST)
    else:
        with GitLabSandbox() as gitlab:
            gitlab.state.add_user("agent-bot", token=GITLAB_TOKEN, bot=True)
            gitlab.state.add_project(REPO)
            gitlab.state.set_access(REPO, "agent-bot", DEVELOPER)
            gitlab.state.init_repo(REPO, {SCRIPT: "echo default\n", "README.md": "hi\n"})
            gitlab.state.create_branch(REPO, "pr-head")
            gitlab.state.git.commit_files(REPO, "pr-head", {SCRIPT: "echo evil\n"})
            yield GitLabSource(GitLabConfig(api_url=gitlab.url, token=SecretStr(GITLAB_TOKEN), group="acme"), FAST)


async def test_reads_the_default_branch_version(source: GitHubSource | GitLabSource) -> None:
    try:
        assert await source.read_default_branch_file(REPO, SCRIPT) == b"echo default\n"
        assert await source.read_default_branch_file(REPO, ".coding-agent/missing.sh") is None
    finally:
        await source.aclose()

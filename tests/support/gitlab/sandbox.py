"""A GitLab testing server running on a loopback port, for tests and benchmarks.

The same port serves the projects' git content over smart HTTP at `http_url_to_repo`.
"""

from __future__ import annotations

from pathlib import Path

from coding_agent.sandbox.faults import FaultInjector
from coding_agent.sandbox.git_http import GitHttpRouter
from coding_agent.sandbox.http_server import ServedApp
from tests.support.gitlab.app import API_PREFIX, create_gitlab_app
from tests.support.gitlab.git import gitlab_git_backend
from tests.support.gitlab.state import GitLabState

__all__ = ["GitLabSandbox"]


class GitLabSandbox(ServedApp):
    """State + app + `BackgroundServer` in one `with` block.

    `url` is the instance URL (what python-gitlab and `gitlab.api_url` take); `api_url`
    adds `/api/v4`. Seed `state` before or after entering; both are live.
    """

    def __init__(self, state: GitLabState | None = None, faults: FaultInjector | None = None) -> None:
        self.state = state or GitLabState()
        self.faults = faults or FaultInjector()
        super().__init__(
            GitHttpRouter(create_gitlab_app(self.state, self.faults), gitlab_git_backend(self.state), self.faults)
        )

    @property
    def api_url(self) -> str:
        return self.url + API_PREFIX

    def git_dir(self, project: str) -> Path:
        """The bare repository behind the project's clone URL, for tests that inspect branches."""
        return self.state.git_dir(project)

    def send_hooks_to(self, url: str, token: str | None = None) -> None:
        """Deliver the CI webhooks (Pipeline Hook, Job Hook) to `url`, linking to this server."""
        self.state.send_hooks_to(url, token, base_url=self.url)

    def _on_stop(self) -> None:
        self.state.close_hooks()
        self.state.git.close()

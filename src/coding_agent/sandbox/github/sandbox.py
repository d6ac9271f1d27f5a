"""A whole sandbox GitHub in one `with`: state, fault injector, app and a live server.

Tests, benchmarks and `coding-agent demo` use it; `url` is what githubkit takes as
`base_url` (it stands in for https://api.github.com). The same port serves the
repositories' git content over smart HTTP at each repository's `clone_url`, and, given a
`Playground`, a page for people under `/_playground/` (`playground.py`). With
`send_webhooks`, CI changes a test makes (`state.ci_job`, `app_check`, `set_status`, a
re-run) reach a webhook target as GitHub's signed deliveries.
"""

from __future__ import annotations

from pathlib import Path

from starlette.types import ASGIApp

from coding_agent.sandbox.faults import FaultInjector
from coding_agent.sandbox.git_http import GitHttpRouter
from coding_agent.sandbox.github.app import create_github_app
from coding_agent.sandbox.github.git import github_git_backend
from coding_agent.sandbox.github.playground import KEY_PARAMETER, Playground, WithPlayground, create_playground_app
from coding_agent.sandbox.github.state import GitHubState
from coding_agent.sandbox.github.webhooks import WebhookSender
from coding_agent.sandbox.http_server import ServedApp

__all__ = ["GitHubSandbox"]


class GitHubSandbox(ServedApp):
    """Serve a `GitHubState` on a loopback port; `state` and `faults` stay in the caller's hands."""

    def __init__(
        self,
        state: GitHubState | None = None,
        faults: FaultInjector | None = None,
        playground: Playground | None = None,
        compress: bool = False,
    ) -> None:
        """`compress`: gzip the API's answers for clients that accept it, as GitHub does
        (off by default: the tests read the sandbox's bodies as sent)."""
        self.state = state or GitHubState()
        self.faults = faults or FaultInjector()
        self.playground = playground
        self._webhooks: list[WebhookSender] = []
        api: ASGIApp = create_github_app(self.state, self.faults, compress)
        if playground is not None:
            api = WithPlayground(api, create_playground_app(self.state, playground))
        super().__init__(GitHttpRouter(api, github_git_backend(self.state), self.faults))

    @property
    def playground_url(self) -> str:
        """The page for people (only with a `Playground`), with its secret."""
        assert self.playground is not None, "a sandbox without a playground"
        return f"{self.url}/_playground/?{KEY_PARAMETER}={self.playground.secret}"

    def git_dir(self, repo: str) -> Path:
        """The bare repository behind `repo`'s clone URL, for tests that inspect branches."""
        return self.state.git_dir(repo)

    def send_webhooks(self, target: str, secret: str) -> WebhookSender:
        """POST every CI change from now on to `target`, signed with `secret`."""
        sender = WebhookSender(self.state, target, secret, self.url)
        self._webhooks.append(sender)
        return sender

    def _on_stop(self) -> None:
        for sender in self._webhooks:
            sender.close()
        self.state.git.close()

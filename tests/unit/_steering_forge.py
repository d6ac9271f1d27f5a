"""A sandbox GitHub with one repository and a GitHubSource on it, for steering unit tests:
the parts under test read and write a real forge over HTTP, and the sandbox's request
log says exactly what they cost."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass
from datetime import datetime

from pydantic import SecretStr

from coding_agent.config import GitHubConfig
from coding_agent.domain.tasks import TaskKey, TaskKind
from coding_agent.retry import RetryPolicy
from coding_agent.sandbox.github import GitHubSandbox, GitHubState
from coding_agent.sources.github import GitHubSource

REPO = "acme/widgets"
BOT = "coding-bot"
TOKEN = "ghp_" + "UnitSteeringToken0123456789abcd"

__all__ = ["Forge", "forge", "REPO", "BOT"]


@dataclass
class Forge:
    sandbox: GitHubSandbox
    source: GitHubSource
    key: TaskKey
    number: int

    def reads_of(self, path: str) -> int:
        """GET requests to exactly `path` since the last `clear()`."""
        return sum(1 for r in self.sandbox.state.requests() if r.method == "GET" and r.path == path)

    def clear(self) -> None:
        self.sandbox.state.clear_requests()


@asynccontextmanager
async def forge(
    assigned: bool = True, bot_name: str | None = BOT, clock: Callable[[], datetime] | None = None
) -> AsyncIterator[Forge]:
    with GitHubSandbox(GitHubState(clock=clock)) as sandbox:
        state = sandbox.state
        state.add_user("alice", token="t-alice")
        state.add_user(BOT, token=TOKEN, bot=True)
        state.add_repo(REPO)
        state.set_permission(REPO, "alice", "admin")
        state.set_permission(REPO, BOT, "write")
        number = state.create_issue(REPO, "A task", "Do it.", author="alice")
        if assigned:
            state.assign(REPO, number, BOT, actor="alice")
        config = GitHubConfig(api_url=sandbox.url, token=SecretStr(TOKEN), owner="acme", bot_name=bot_name)
        source = GitHubSource(config, RetryPolicy(retries=0))
        try:
            yield Forge(sandbox, source, TaskKey("github", REPO, TaskKind.ISSUE, number), number)
        finally:
            await source.aclose()

"""End-to-end fixtures: sandbox forges, the replay model, configs, and the CLI as a user runs it.

Each e2e test seeds a forge, scripts the model, writes a config file pointing at both,
and runs `coding-agent run --once` (a real subprocess) or the service in-process.
Secrets are random strings passed through the environment, so the tests can grep
every output for them afterwards.
"""

from __future__ import annotations

import os
import asyncio
import secrets
import subprocess
import sys
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal, Protocol

import pytest
import yaml

from coding_agent.sandbox.github import GitHubSandbox
from coding_agent.sandbox.replay_model import ReplaySandbox
from coding_agent.sources.writes import strip_marker
from tests.support.gitlab import GitLabSandbox
from tests.support.services import amqp_url, delete_queues, fresh_postgres_database, postgres_admin_url, reachable

# Random strings no built-in redaction pattern matches (no ghp_/glpat-/sk- shapes): a
# test that finds none of them anywhere proves the configured secrets are masked, not
# that a token-shaped regex happened to catch them. Fresh per test process.
GITHUB_BOT_TOKEN = secrets.token_hex(20)
GITLAB_BOT_TOKEN = secrets.token_hex(20)
LLM_API_KEY = secrets.token_hex(20)
SECRETS = (GITHUB_BOT_TOKEN, GITLAB_BOT_TOKEN, LLM_API_KEY)

REPO = "acme/widgets"
BOT = "agent-bot"
MAINTAINER = "alice"
READER = "rita"

Kind = Literal["issue", "change"]

HELLO_SCRIPT: dict[str, Any] = {
    "replies": [
        {
            "tool": "workspace/create",
            "args": {"path": "hello.txt", "content": "hello from the agent\n"},
            "comment": "Writing hello.txt now.",
        },
        {"done": "Wrote hello.txt with a greeting."},
    ]
}


class ForgeUnderTest(Protocol):
    """What the e2e tests need of a sandbox forge, the same for GitHub and GitLab."""

    name: str
    url: str

    def config_section(self) -> dict[str, Any]: ...
    def open_task(self, kind: Kind, title: str, body: str, labelled_by: str = MAINTAINER) -> int: ...
    def labels(self, kind: Kind, number: int) -> list[str]: ...
    def comments(self, kind: Kind, number: int) -> list[tuple[str, str]]:
        """(author, body) as a reader sees them: without the agent's hidden write marker."""
        ...


class GitHubForge:
    name = "github"

    def __init__(self, sandbox: GitHubSandbox) -> None:
        self.sandbox = sandbox
        self.url = sandbox.url
        state = sandbox.state
        state.add_user(MAINTAINER)
        state.add_user(READER)
        state.add_user(BOT, token=GITHUB_BOT_TOKEN, bot=True)
        state.add_repo(REPO)
        state.set_permission(REPO, MAINTAINER, "admin")
        state.set_permission(REPO, READER, "read")
        state.set_permission(REPO, BOT, "write")

    def config_section(self) -> dict[str, Any]:
        return {"api_url": self.url, "token": "${E2E_GITHUB_TOKEN}", "owner": "acme", "bot_name": BOT}

    def open_task(self, kind: Kind, title: str, body: str, labelled_by: str = MAINTAINER) -> int:
        state = self.sandbox.state
        if kind == "issue":
            number = state.create_issue(REPO, title, body, author=MAINTAINER)
        else:
            number = state.create_pull(REPO, title, body, author=MAINTAINER, head="feature", base="main")
        state.add_label(REPO, number, "coding agent", actor=labelled_by)
        return number

    def labels(self, kind: Kind, number: int) -> list[str]:
        return list(self.sandbox.state.issue(REPO, number).labels)

    def comments(self, kind: Kind, number: int) -> list[tuple[str, str]]:
        return [(c.author, strip_marker(c.body)) for c in self.sandbox.state.comments(REPO, number)]


class GitLabForge:
    name = "gitlab"

    def __init__(self, sandbox: GitLabSandbox) -> None:
        self.sandbox = sandbox
        self.url = sandbox.url
        state = sandbox.state
        state.add_user(MAINTAINER)
        state.add_user(READER)
        state.add_user(BOT, token=GITLAB_BOT_TOKEN, bot=True)
        state.add_group("acme")
        state.add_project(REPO)
        state.set_access(REPO, MAINTAINER, 40)
        state.set_access(REPO, READER, 20)
        state.set_access(REPO, BOT, 30)

    def config_section(self) -> dict[str, Any]:
        return {"api_url": self.url, "token": "${E2E_GITLAB_TOKEN}", "group": "acme", "bot_name": BOT}

    def _kind(self, kind: Kind) -> str:
        return "issue" if kind == "issue" else "mr"

    def open_task(self, kind: Kind, title: str, body: str, labelled_by: str = MAINTAINER) -> int:
        state = self.sandbox.state
        if kind == "issue":
            number = state.create_issue(REPO, title, body, author=MAINTAINER)
        else:
            number = state.create_merge_request(REPO, title, body, author=MAINTAINER, source_branch="feature")
        state.add_label(REPO, number, "coding agent", actor=labelled_by, kind=self._kind(kind))
        return number

    def labels(self, kind: Kind, number: int) -> list[str]:
        return list(self.sandbox.state.labels_of(REPO, number, kind=self._kind(kind)))

    def comments(self, kind: Kind, number: int) -> list[tuple[str, str]]:
        state = self.sandbox.state
        notes = state.notes(REPO, number, kind=self._kind(kind), system=False)
        names = {state.find_user(name).id: name for name in (MAINTAINER, READER, BOT)}  # type: ignore[union-attr]
        return [(names.get(note.author_id, str(note.author_id)), strip_marker(note.body)) for note in notes]


@pytest.fixture
def github_forge() -> Iterator[GitHubForge]:
    with GitHubSandbox() as sandbox:
        yield GitHubForge(sandbox)


@pytest.fixture
def gitlab_forge() -> Iterator[GitLabForge]:
    with GitLabSandbox() as sandbox:
        yield GitLabForge(sandbox)


@pytest.fixture(params=["github", "gitlab"])
def forge(request: pytest.FixtureRequest) -> ForgeUnderTest:
    return request.getfixturevalue(f"{request.param}_forge")


@pytest.fixture
def distributed() -> Iterator[tuple[str, str]]:
    """(database URL, queue name): a fresh PostgreSQL database and RabbitMQ queue name."""
    if not reachable(postgres_admin_url()) or not reachable(amqp_url()):
        pytest.skip("PostgreSQL and RabbitMQ are needed (127.0.0.1:5432, :5672)")
    name = f"coding-agent.test.{uuid.uuid4().hex[:10]}"
    with fresh_postgres_database() as url:
        yield url, name
    asyncio.run(delete_queues(name))


@pytest.fixture
def replay() -> Iterator[ReplaySandbox]:
    with ReplaySandbox(HELLO_SCRIPT) as sandbox:
        yield sandbox


def llm_section(replay: ReplaySandbox, provider: str = "openai", function_calling: bool = True) -> dict[str, Any]:
    if provider == "ollama":
        section: dict[str, Any] = {"endpoint": replay.url, "model": "replay", "context_length": 8192}
    else:
        section = {"base_url": replay.openai_base_url, "model": "replay", "api_key": "${E2E_LLM_KEY}"}
    return {"provider": provider, "function_calling": function_calling, provider: section}


@dataclass
class AgentSetup:
    """A config file and the directories it points at, for one test."""

    directory: Path
    config_path: Path

    @property
    def contexts(self) -> Path:
        return self.directory / "contexts"

    @property
    def workspaces(self) -> Path:
        return self.directory / "workspaces"

    @property
    def logs(self) -> Path:
        return self.directory / "logs"

    def completed_runs(self) -> list[Path]:
        completed = self.contexts / "completed"
        return sorted(completed.iterdir()) if completed.exists() else []


def secret_env() -> dict[str, str]:
    return {"E2E_GITHUB_TOKEN": GITHUB_BOT_TOKEN, "E2E_GITLAB_TOKEN": GITLAB_BOT_TOKEN, "E2E_LLM_KEY": LLM_API_KEY}


def write_config(directory: Path, forges: list[ForgeUnderTest], llm: dict[str, Any], **extra: Any) -> AgentSetup:
    data: dict[str, Any] = {
        "task_source": [forge.name for forge in forges],
        "llm": llm,
        "mcp_servers": [],  # the config adds the built-in workspace server
        "workspace": {"base_dir": str(directory / "workspaces")},
        "context_storage": {"base_dir": str(directory / "contexts")},
        "logging": {"dir": str(directory / "logs"), "level": "DEBUG"},
        "database": {"url": f"sqlite:///{directory / 'state.db'}"},
        "retry": {"base_delay_seconds": 0.01, "max_delay_seconds": 5},
    }
    for forge in forges:
        data[forge.name] = forge.config_section()
    data.update(extra)
    path = directory / "config.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return AgentSetup(directory, path)


def run_cli(setup: AgentSetup, *args: str, timeout: float = 180) -> subprocess.CompletedProcess[str]:
    """Run `coding-agent <args> --config <file>` as a user would, with the secrets in the env."""
    env = {**os.environ, **secret_env()}
    for name in ("GITHUB_TOKEN", "GITLAB_TOKEN", "OPENAI_API_KEY", "GITHUB_BOT_NAME", "GITLAB_BOT_NAME"):
        env.pop(name, None)
    return subprocess.run(
        [sys.executable, "-m", "coding_agent.cli", *args, "--config", str(setup.config_path)],
        cwd=setup.directory,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def load_for_service(setup: AgentSetup) -> Any:
    """The setup's config, loaded in-process with the secrets in place."""
    from coding_agent.config import load_config

    return load_config(setup.config_path, env={**os.environ, **secret_env()})


PROGRESS_HEADER = "## 🤖 coding-agent progress"


def progress_comments(bodies: list[str]) -> list[str]:
    """The progress comments among `bodies` (SPEC 8.4: one per run, step comments inside)."""
    return [body for body in bodies if body.startswith(PROGRESS_HEADER)]

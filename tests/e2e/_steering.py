"""What the steering e2e tests share: acting on the sandbox forges as a person would
(comment, unassign), reading what the replay model was sent, and waiting on conditions."""

from __future__ import annotations

import asyncio
import os
import re
import signal
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from coding_agent.config import AgentConfig
from coding_agent.runtime.service import AgentService, CycleReport
from coding_agent.sandbox.replay_model import RecordedRequest
from tests.support.services import amqp_url
from tests.support.waiting import wait_for

from .conftest import BOT, MAINTAINER, REPO, ForgeUnderTest, Kind, llm_section, secret_env, write_config

__all__ = [
    "post_comment",
    "review_comment",
    "assign",
    "unassign",
    "THREE_FILES",
    "three_files_script",
    "spawn_cli",
    "pause_signal_action",
    "user_messages",
    "new_comment_messages",
    "assistant_turns",
    "run_cycle",
    "wait_for",
    "steering_config",
    "distributed_config",
]


def _gitlab_kind(kind: Kind) -> str:
    return "issue" if kind == "issue" else "mr"


def post_comment(forge: ForgeUnderTest, kind: Kind, number: int, author: str, body: str) -> None:
    state: Any = forge.sandbox.state  # type: ignore[attr-defined]
    if forge.name == "github":
        state.add_comment(REPO, number, author, body)
    else:
        state.add_note(REPO, number, author, body, kind=_gitlab_kind(kind))


def review_comment(forge: ForgeUnderTest, number: int, author: str, body: str) -> None:
    """A comment in a review thread: a PR review comment / an MR discussion."""
    state: Any = forge.sandbox.state  # type: ignore[attr-defined]
    if forge.name == "github":
        state.add_review_comment(REPO, number, author, body, path="README.md", line=1)
    else:
        state.add_discussion(REPO, number, author, body, kind="mr")


def assign(forge: ForgeUnderTest, kind: Kind, number: int, login: str = BOT, *, assigned: bool = True) -> None:
    """Assign `login` (or, with `assigned=False`, unassign it) as a maintainer would."""
    state: Any = forge.sandbox.state  # type: ignore[attr-defined]
    change = state.assign if assigned else state.unassign
    if forge.name == "github":
        change(REPO, number, login, actor=MAINTAINER)
    else:
        change(REPO, number, login, actor=MAINTAINER, kind=_gitlab_kind(kind))


def unassign(forge: ForgeUnderTest, kind: Kind, number: int, login: str = BOT) -> None:
    assign(forge, kind, number, login, assigned=False)


THREE_FILES: list[dict[str, Any]] = [
    {"tool": "workspace/create", "args": {"path": "a.txt", "content": "a\n"}, "comment": "Writing a.txt."},
    {"tool": "workspace/create", "args": {"path": "b.txt", "content": "b\n"}, "comment": "Writing b.txt."},
    {"tool": "workspace/create", "args": {"path": "c.txt", "content": "c\n"}, "comment": "Writing c.txt."},
    {"done": "Wrote three files."},
]


def three_files_script(at: int, action: str) -> dict[str, Any]:
    """Three tool steps and done; the reply `at` runs the `before` action `action`."""
    replies = [dict(step) for step in THREE_FILES]
    replies[at]["before"] = {action: {}}
    return {"replies": replies}


def pause_signal_action(directory: Path) -> Callable[[dict[str, Any]], None]:
    """A `before` action that creates the default pause signal file of a steering config."""

    def create(_: dict[str, Any]) -> None:
        signal_file = directory / "contexts" / "pause_signal"
        signal_file.parent.mkdir(parents=True, exist_ok=True)
        signal_file.touch()

    return create


def spawn_cli(
    config_path: Path, *args: str, output: int = subprocess.PIPE, env: dict[str, str] | None = None
) -> subprocess.Popen[str]:
    """`coding-agent <args> --config <file>` as a background process, secrets (and `env`) in its env."""
    return subprocess.Popen(
        [sys.executable, "-m", "coding_agent.cli", *args, "--config", str(config_path)],
        cwd=config_path.parent,
        env={**os.environ, **secret_env(), **(env or {})},
        stdout=output,
        stderr=output,
        text=True,
    )


def start_serve(config_path: Path, stderr: Path) -> tuple[subprocess.Popen[str], str]:
    """`serve` in its own process, and the URL it serves the dashboard and webhooks on
    (from its stderr, which goes to `stderr`)."""
    with stderr.open("w") as sink:
        process = spawn_cli(config_path, "serve", output=sink.fileno())

    def served_url() -> str | None:
        if process.poll() is not None:
            raise AssertionError(f"serve exited {process.returncode}: {stderr.read_text()[-3000:]}")
        found = re.search(r"dashboard at (http://\S+)", stderr.read_text())
        return found.group(1) if found else None

    return process, wait_for(served_url, 120, "serve to listen")


def stop_serve(process: subprocess.Popen[str]) -> None:
    if process.poll() is None:
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(60)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(30)


def user_messages(request: RecordedRequest) -> list[str]:
    return [str(m.get("content")) for m in request.body.get("messages", []) if m.get("role") == "user"]


def new_comment_messages(request: RecordedRequest) -> list[str]:
    """The new-comment messages (SPEC 8.1) in what one request sent."""
    return [text for text in user_messages(request) if text.startswith(("[New Comment from @", "[New Comments Detected]:"))]


def assistant_turns(request: RecordedRequest) -> int:
    """How many model replies the request's history holds: the step it asks for, minus one."""
    return sum(1 for m in request.body.get("messages", []) if m.get("role") == "assistant")


def run_cycle(config: AgentConfig) -> CycleReport:
    """One poll cycle of a fresh in-process service (the code `run --once` runs)."""

    async def once() -> CycleReport:
        service = AgentService(config)
        try:
            return await service.run_cycle()
        finally:
            await service.aclose()

    return asyncio.run(once())


def steering_config(
    directory: Path, forges: list[ForgeUnderTest], replay: Any, function_calling: bool = True, **extra: Any
) -> Any:
    """A config for steering tests: memories off (their extra model request is not a step),
    assignee checks at every checkpoint, and the test's own overrides."""
    settings: dict[str, Any] = {
        "memory": {"enabled": False},
        "task_stop": {"enabled": True, "check_interval": 1, "min_check_interval_seconds": 0},
    }
    settings.update(extra)
    return write_config(directory, forges, llm_section(replay, function_calling=function_calling), **settings)


def distributed_config(directory: Path, forge: ForgeUnderTest, replay: Any, url: str, name: str, **extra: Any) -> Any:
    """`steering_config` on the `distributed` fixture's PostgreSQL database and RabbitMQ queue."""
    return steering_config(
        directory,
        [forge],
        replay,
        database={"url": url},
        queue={"backend": "rabbitmq", "url": amqp_url(), "name": name},
        **extra,
    )

"""What every command shares: the --config option, loading the config, failing with an
exit code, parsing a task key, and running a coroutine to an exit code.

Exit codes: 0 when the agent ran (even if some tasks failed: those are reported on the
tasks themselves), 2 for a bad configuration or bad arguments, 1 when the agent itself
could not run.
"""

from __future__ import annotations

import asyncio
import logging
import os
from collections.abc import Coroutine
from pathlib import Path
from typing import Annotated, Any

import typer

from coding_agent.config import DEFAULT_CONFIG_PATH, AgentConfig, load_config
from coding_agent.errors import AgentError, ConfigError
from coding_agent.logging_setup import configure_logging
from coding_agent.redaction import Redactor

ConfigOption = Annotated[
    Path | None,
    typer.Option("--config", "-c", help="Config file (default: $CODING_AGENT_CONFIG or ./config.yaml)."),
]

TaskArgument = Annotated[
    str | None, typer.Argument(help="A task key, e.g. 'github:owner/repo#12' or 'gitlab:group/project!34'.")
]

log = logging.getLogger("coding_agent.cli")


def fail(message: str, code: int) -> typer.Exit:
    typer.echo(f"coding-agent: {message}", err=True)
    return typer.Exit(code)


def config_path(path: Path | None) -> Path:
    return path or Path(os.environ.get("CODING_AGENT_CONFIG", DEFAULT_CONFIG_PATH))


def load(path: Path | None, local: bool = False) -> AgentConfig:
    """Load the config. `local`: for commands that only read the local state (status,
    memory, pause, resume), so a `${GITHUB_TOKEN}` that is not exported is no error."""
    try:
        config = load_config(config_path(path), local_only=local)
    except ConfigError as error:
        raise fail(str(error), 2) from None
    configure_logging(config.logging, Redactor(config.secrets()))
    return config


def task_key(text: str) -> str:
    from coding_agent.domain.tasks import TaskKey

    try:
        return str(TaskKey.parse(text))
    except ValueError as error:
        raise fail(str(error), 2) from None


class Unreachable(Exception):
    """The database, the queue or (with webhooks) dashboard.bind is unusable at start:
    one line naming it, exit 2."""


def exit_with(config: AgentConfig, work: Coroutine[Any, Any, int]) -> None:
    """Run `work` and exit with its code; an agent error is one line on stderr, exit 1."""
    try:
        code = asyncio.run(work)
    except Unreachable as error:
        log.error("agent could not start: %s", error)
        raise fail(Redactor(config.secrets()).text(str(error)), 2) from None
    except AgentError as error:
        log.error("agent could not run: %s", error)
        raise fail(Redactor(config.secrets()).text(str(error)), 1) from None
    raise typer.Exit(code)

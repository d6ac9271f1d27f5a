"""The `coding-agent` command: parses arguments, loads the config, calls one service each.

Exit codes: 0 when the agent ran (even if some tasks failed: those are reported on the
tasks themselves), 2 for a bad configuration or bad arguments, 1 when the agent itself
could not run.
"""

from __future__ import annotations

import asyncio
import logging
import os
import signal
import sys
from pathlib import Path
from typing import Annotated, Optional

import typer

from coding_agent.config import DEFAULT_CONFIG_PATH, AgentConfig, load_config
from coding_agent.errors import AgentError, ConfigError
from coding_agent.logging_setup import configure_logging
from coding_agent.redaction import Redactor

__all__ = ["app", "main"]

app = typer.Typer(
    name="coding-agent",
    help="A self-hosted coding agent for GitHub and GitLab issues, PRs and MRs.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)

ConfigOption = Annotated[
    Optional[Path],
    typer.Option("--config", "-c", help="Config file (default: $CODING_AGENT_CONFIG or ./config.yaml)."),
]

log = logging.getLogger("coding_agent.cli")


def _fail(message: str, code: int) -> typer.Exit:
    typer.echo(f"coding-agent: {message}", err=True)
    return typer.Exit(code)


def _load(path: Path | None) -> AgentConfig:
    chosen = path or Path(os.environ.get("CODING_AGENT_CONFIG", DEFAULT_CONFIG_PATH))
    try:
        config = load_config(chosen)
    except ConfigError as error:
        raise _fail(str(error), 2) from None
    configure_logging(config.logging, Redactor(config.secrets()))
    return config


async def _run_service(config: AgentConfig, once: bool) -> int:
    from coding_agent.runtime.service import AgentService

    service = AgentService(config)
    try:
        if once:
            report = await service.run_cycle()
            for result in report.results:
                typer.echo(f"{result.task_key}: {result.status} after {result.steps} step(s)")
            for error in report.errors:
                typer.echo(error, err=True)
            return 0
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for signum in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(signum, stop.set)
        await service.serve(stop)
        return 0
    finally:
        await service.aclose()


def _run(config: AgentConfig, once: bool) -> None:
    try:
        code = asyncio.run(_run_service(config, once))
    except AgentError as error:
        log.error("agent could not run: %s", error)
        raise _fail(Redactor(config.secrets()).text(str(error)), 1) from None
    raise typer.Exit(code)


@app.command()
def run(
    config: ConfigOption = None,
    once: Annotated[bool, typer.Option("--once", help="Work every pending task, then exit (for cron).")] = False,
) -> None:
    """Work pending tasks: once with --once, else poll every scheduling.interval_seconds."""
    _run(_load(config), once)


@app.command()
def serve(config: ConfigOption = None) -> None:
    """Poll continuously and work tasks with up to `workers` at once, until SIGTERM/SIGINT."""
    _run(_load(config), once=False)


@app.command()
def status(config: ConfigOption = None) -> None:
    """List runs recorded in the state store, with their status and token use."""
    from coding_agent.runtime.state_store import StateStore

    settings = _load(config)
    store = StateStore(settings.database.url)
    try:
        runs = store.runs()
        if not runs:
            typer.echo("no runs recorded")
        for record in runs:
            typer.echo(
                f"{record.task_key}  {record.status:<8} steps={record.steps:<3} "
                f"tokens={record.prompt_tokens}+{record.completion_tokens}  run={record.uuid}"
            )
    finally:
        store.close()


@app.command("mcp-workspace")
def mcp_workspace(
    root: Annotated[Path, typer.Option("--root", help="The workspace directory the tools may touch.")],
) -> None:
    """Run the built-in workspace MCP server on stdio (started by the agent for each run)."""
    from coding_agent.tools.workspace_server import main as workspace_main

    workspace_main(["--root", str(root)])


@app.command()
def demo(
    llm: Annotated[bool, typer.Option("--llm", help="Use the model configured in --config instead of the replay model.")] = False,
    config: ConfigOption = None,
    keep: Annotated[Optional[Path], typer.Option("--dir", help="Keep the demo's files in this directory.")] = None,
) -> None:
    """Run one whole task on a built-in sandbox forge with the real MCP workspace server."""
    from coding_agent.demo import run_demo

    llm_config = _load(config).llm if llm else None
    raise typer.Exit(run_demo(llm_config, keep))


def main() -> None:  # pragma: no cover - console entry point
    app()


if __name__ == "__main__":  # pragma: no cover
    sys.exit(app())

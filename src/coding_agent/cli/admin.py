"""The commands around the agent rather than of it: `memory list|clear`, `cache clear`,
`cleanup`, `doctor`, `config-reference`, `mcp-workspace`, `demo`."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Annotated

import typer

from coding_agent.cli.common import ConfigOption, config_path, fail, load

RepoArgument = Annotated[
    str | None, typer.Argument(help="A repository: 'owner/repo', or 'github:owner/repo' / 'gitlab:group/project'.")
]


def memory_list(repo: RepoArgument = None, config: ConfigOption = None) -> None:
    """Show the memories of REPO (or of every repository)."""
    import time

    from coding_agent.context.memory_admin import memory_listing
    from coding_agent.store.memories import MemoryStore
    from coding_agent.store.state import StateStore

    settings = load(config, local=True)
    store = StateStore(settings.database.url)
    try:
        lines = memory_listing(MemoryStore(store.engine), repo, settings.memory.active_channel_days, time.time())
    finally:
        store.close()
    typer.echo("\n".join(lines))


def memory_clear(
    repo: RepoArgument = None,
    yes: Annotated[bool, typer.Option("--yes", help="Clear every repository's memories without asking.")] = False,
    config: ConfigOption = None,
) -> None:
    """Forget the memories of REPO (without REPO: of every repository, after confirmation)."""
    from coding_agent.context.memory_admin import clear_memories
    from coding_agent.store.memories import MemoryStore
    from coding_agent.store.state import StateStore

    settings = load(config, local=True)
    if repo is None and not yes and not typer.confirm("Forget every repository's memories?", default=False):
        raise fail("nothing cleared", 1)
    store = StateStore(settings.database.url)
    try:
        channels, rows = clear_memories(MemoryStore(store.engine), repo)
    finally:
        store.close()
    if repo is not None and channels == 0:
        raise fail(f"no memories of {repo}", 1)
    typer.echo(f"cleared the memories of {channels} repositor{'y' if channels == 1 else 'ies'} ({rows} record(s))")


def cache_clear(config: ConfigOption = None) -> None:
    """Remove every cached setup: the next run of each repository runs its setup again."""
    from coding_agent.workspace.setup_cache import SetupCache

    settings = load(config)
    removed = SetupCache(Path(settings.setup.cache_dir)).clear()
    typer.echo(f"removed {removed} cached setup(s) from {settings.setup.cache_dir}")


def cleanup(config: ConfigOption = None) -> None:
    """Remove completed contexts (and thread memories) older than context_storage.cleanup_days,
    and the clones of runs that ended (also those that ended on another machine)."""
    from coding_agent.runtime.cleanup import Cleanup
    from coding_agent.store.state import StateStore

    settings = load(config)
    store = StateStore(settings.database.url)
    try:
        report = Cleanup(settings, store).run()
    finally:
        store.close()
    typer.echo(
        f"removed {report.contexts_removed} completed context(s) and {report.thread_memories_removed} thread memorie(s)"
        f" older than {settings.context_storage.cleanup_days:g} day(s), and {report.clones_removed} ended run(s)' clone(s)"
    )


def doctor(config: ConfigOption = None) -> None:
    """Check the deployment, one line per check: config, forge tokens, LLM, MCP servers,
    sandbox, database, queue. Exit 0 when all pass, 1 otherwise. Prints no secret."""
    from coding_agent.cli.checks import run_doctor

    path = config_path(config)
    settings = load(config)
    checks = asyncio.run(run_doctor(settings, str(path)))
    for check in checks:
        typer.echo(check.line())
    raise typer.Exit(0 if all(check.ok for check in checks) else 1)


def config_reference(
    write: Annotated[
        Path | None, typer.Option("--write", help="Replace the generated section of this file (README.md).")
    ] = None,
    example: Annotated[Path, typer.Option("--example", help="config.example.yaml, for the key comments.")] = Path(
        "config.example.yaml"
    ),
) -> None:
    """Print the config reference generated from the config model (or write it into README.md)."""
    from coding_agent.config_reference import reference_markdown, write_readme

    if write is None:
        text = example.read_text(encoding="utf-8") if example.exists() else ""
        typer.echo(reference_markdown(text), nl=False)
        return
    try:
        changed = write_readme(write, example)
    except (OSError, ValueError) as error:
        raise fail(str(error), 2) from None
    typer.echo(f"{write}: config reference {'updated' if changed else 'already up to date'}")


def mcp_workspace(
    root: Annotated[Path, typer.Option("--root", help="The workspace directory the tools may touch.")],
    sandbox: Annotated[str, typer.Option("--sandbox", help="bwrap (default) or none.")] = "bwrap",
) -> None:
    """Run the built-in workspace MCP server on stdio (started by the agent for each run)."""
    from coding_agent.tools.workspace_server import main as workspace_main

    workspace_main(["--root", str(root), "--sandbox", sandbox])


def demo(
    llm: Annotated[bool, typer.Option("--llm", help="Use the model configured in --config instead of the replay model.")] = False,
    config: ConfigOption = None,
    keep: Annotated[Path | None, typer.Option("--dir", help="Keep the demo's files in this directory.")] = None,
    planning: Annotated[
        bool, typer.Option("--planning", help="Work the task in planning mode (plan, act, reflect, verify).")
    ] = False,
    serve: Annotated[
        bool,
        typer.Option("--serve", help="Keep running as a playground: a forge page to open and label issues, and the dashboard."),
    ] = False,
    app: Annotated[
        bool,
        typer.Option(
            "--app", help="Run as a GitHub App installed on the demo repository (installation tokens, <slug>[bot])."
        ),
    ] = False,
) -> None:
    """Run one whole task on a built-in sandbox forge with the real MCP workspace server
    (with --serve: every task labelled on the sandbox forge's page, until Ctrl-C)."""
    from coding_agent.demo import run_demo, run_playground

    # Only the model of --llm comes from the config, and whether the operator allows
    # running its commands without bubblewrap (security.sandbox: none, as `serve`).
    loaded = load(config) if llm else None
    llm_config = loaded.llm if loaded is not None else None
    allow_none = loaded is not None and loaded.security.sandbox == "none"
    if serve:
        from coding_agent.web.server import serving_http

        raise typer.Exit(run_playground(llm_config, keep, serving_http, planning, allow_none, app))
    raise typer.Exit(run_demo(llm_config, keep, planning, allow_none, app))

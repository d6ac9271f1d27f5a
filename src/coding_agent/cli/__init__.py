"""The `coding-agent` command: parses arguments, loads the config, calls one service each.

This module is the command table: the Typer app and, in the order `--help` lists them,
the commands, each a function in one of the modules beside it: `serving.py` (run,
serve, producer, worker), `tasks.py` (status, pause, resume, stop), `admin.py` (memory,
cache, cleanup, doctor, config-reference, mcp-workspace, demo), `github_app.py`
(github-app manifest, convert); `common.py` holds what
they share (the --config option, loading, exit codes).

Exit codes: 0 when the agent ran (even if some tasks failed: those are reported on the
tasks themselves), 2 for a bad configuration or bad arguments, 1 when the agent itself
could not run.
"""

from __future__ import annotations

import typer

from coding_agent.cli import admin, github_app, serving, tasks

__all__ = ["app", "main"]

app = typer.Typer(
    name="coding-agent",
    help="A self-hosted coding agent for GitHub and GitLab issues, PRs and MRs.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)

for command in (serving.run, serving.serve, serving.producer, serving.worker):
    app.command()(command)
for task_command in (tasks.status, tasks.pause, tasks.resume, tasks.stop):
    app.command()(task_command)

memory_app = typer.Typer(help="What the agent remembers of each repository (SPEC 9.2).", no_args_is_help=True)
app.add_typer(memory_app, name="memory")
memory_app.command("list")(admin.memory_list)
memory_app.command("clear")(admin.memory_clear)

cache_app = typer.Typer(help="The setup cache (SPEC 7.1: setup.cache).", no_args_is_help=True)
app.add_typer(cache_app, name="cache")
cache_app.command("clear")(admin.cache_clear)

app.command()(admin.cleanup)
app.command()(admin.doctor)
app.command("config-reference")(admin.config_reference)
app.command("mcp-workspace")(admin.mcp_workspace)
app.command()(admin.demo)

github_app_app = typer.Typer(help="Make the agent's GitHub App in two commands (SPEC 17).", no_args_is_help=True)
app.add_typer(github_app_app, name="github-app")
github_app_app.command("manifest")(github_app.manifest)
github_app_app.command("convert")(github_app.convert)


def main() -> None:  # pragma: no cover - console entry point
    app()

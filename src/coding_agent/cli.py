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
from collections.abc import Coroutine
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, Literal, Optional

import typer

from coding_agent.config import DEFAULT_CONFIG_PATH, AgentConfig, load_config
from coding_agent.errors import AgentError, ConfigError
from coding_agent.logging_setup import configure_logging
from coding_agent.redaction import Redactor

if TYPE_CHECKING:
    from coding_agent.runtime.service import AgentService, CycleReport

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


def _config_path(path: Path | None) -> Path:
    return path or Path(os.environ.get("CODING_AGENT_CONFIG", DEFAULT_CONFIG_PATH))


def _load(path: Path | None, local: bool = False) -> AgentConfig:
    """Load the config. `local`: for commands that only read the local state (status,
    memory, pause, resume), so a `${GITHUB_TOKEN}` that is not exported is no error."""
    try:
        config = load_config(_config_path(path), local_only=local)
    except ConfigError as error:
        raise _fail(str(error), 2) from None
    configure_logging(config.logging, Redactor(config.secrets()))
    return config


async def _preflight(config: AgentConfig, once: bool, stop: asyncio.Event) -> bool:
    """Check the forge and the LLM before claiming anything (SPEC 11). `run --once`: False
    when one fails (each named on stderr). `serve`: wait, retrying with backoff, until
    it passes (True) or `stop` is set (False)."""
    from coding_agent.runtime.checks import preflight

    delay = 5.0
    while not stop.is_set():
        failed = await preflight(config)
        if not failed:
            return True
        for check in failed:
            log.error("preflight: %s: %s", check.name, check.detail)
            if once:
                typer.echo(f"coding-agent: preflight failed: {check.name}: {check.detail}", err=True)
        if once:
            return False
        log.warning("preflight: nothing is claimed until this passes; retrying in %.0f s", delay)
        try:
            await asyncio.wait_for(stop.wait(), delay)
        except asyncio.TimeoutError:
            pass
        delay = min(delay * 2, 300.0)
    return False


Role = Literal["once", "serve", "producer", "worker"]


class _Unreachable(Exception):
    """The database, the queue or (with webhooks) dashboard.bind is unusable at start:
    one line naming it, exit 2."""


async def _start_service(config: AgentConfig) -> AgentService:
    """The service with its database and queue reachable, or `_Unreachable` naming which."""
    from sqlalchemy.exc import SQLAlchemyError

    from coding_agent.runtime.service import AgentService

    try:
        service = AgentService(config)
    except SQLAlchemyError as error:
        raise _Unreachable(f"the database (database.url) is not usable: {type(error.orig or error).__name__}") from None
    try:
        await service.queue()
    except (OSError, ConnectionError, asyncio.TimeoutError) as error:
        await service.aclose()
        raise _Unreachable(f"the queue (queue.url, backend {config.queue.backend}) is not reachable: {type(error).__name__}") from None
    except Exception as error:  # aio-pika's own connection errors
        await service.aclose()
        if type(error).__module__.startswith(("aio_pika", "aiormq", "pamqp")):
            raise _Unreachable(f"the queue (queue.url) is not reachable: {type(error).__name__}") from None
        raise
    return service


async def _run_service(config: AgentConfig, role: Role) -> int:
    service = await _start_service(config)
    stop = asyncio.Event()
    _pause_on_signals(service, stop)
    try:
        if not await _preflight(config, role == "once", stop):
            return 1 if role == "once" else 0
        if role == "once":
            _echo_report(await service.run_cycle())
            return 0
        if role == "worker":  # no HTTP: many workers may share a machine
            await service.work(stop)
            return 0
        from coding_agent.web.server import BindError, serving_http

        try:
            async with serving_http(config, service) as url:
                if url:
                    typer.echo(f"coding-agent: dashboard at {url}", err=True)
                await (service.produce(stop) if role == "producer" else service.serve(stop))
        except BindError as error:
            raise _Unreachable(str(error)) from None
        return 0
    finally:
        await service.aclose()


def _pause_on_signals(service: AgentService, stop: asyncio.Event) -> None:
    """The first SIGTERM/SIGINT stops polling and pauses the running tasks at their next
    step (SPEC 8.3); a second one ends the process at once (the tasks are then taken
    over after their lease expires)."""
    loop = asyncio.get_running_loop()

    def first(signum: int) -> None:
        log.info("signal %d: pausing the running tasks, then exiting", signum)
        service.request_shutdown()
        stop.set()
        for each in (signal.SIGTERM, signal.SIGINT):
            loop.remove_signal_handler(each)

    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, first, signum)


def _echo_report(report: CycleReport) -> None:
    for result in report.results:
        typer.echo(f"{result.task_key}: {result.status} after {result.steps} step(s)")
    for error in report.errors:
        typer.echo(error, err=True)


def _check_sandbox(config: AgentConfig) -> None:
    """SPEC 15: no bwrap -> refuse to start, unless the operator chose `security.sandbox: none`."""
    from coding_agent.tools.sandbox import SandboxUnavailable, check_sandbox

    try:
        warning = check_sandbox(config.security.sandbox)
    except SandboxUnavailable as error:
        log.error("refusing to start: %s", error)
        raise _fail(str(error), 2) from None
    if warning is not None:
        log.warning("%s", warning)


def _run(config: AgentConfig, role: Role) -> None:
    if role in ("producer", "worker") and config.queue.backend == "memory":
        raise _fail(f"`{role}` needs a shared queue: set queue.backend to rabbitmq (or use `serve`)", 2)
    if role != "producer":
        _check_sandbox(config)
    _exit_with(config, _run_service(config, role))


def _exit_with(config: AgentConfig, work: Coroutine[Any, Any, int]) -> None:
    """Run `work` and exit with its code; an agent error is one line on stderr, exit 1."""
    try:
        code = asyncio.run(work)
    except _Unreachable as error:
        log.error("agent could not start: %s", error)
        raise _fail(Redactor(config.secrets()).text(str(error)), 2) from None
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
    _run(_load(config), "once" if once else "serve")


@app.command()
def serve(config: ConfigOption = None) -> None:
    """Producer and workers in one process: poll, and work up to `workers` tasks at once,
    each starting as soon as a slot is free, until SIGTERM/SIGINT."""
    _run(_load(config), "serve")


@app.command()
def producer(config: ConfigOption = None) -> None:
    """Only find work and queue it (queue.backend rabbitmq), every scheduling.interval_seconds."""
    _run(_load(config), "producer")


@app.command()
def worker(config: ConfigOption = None) -> None:
    """Only work queued tasks (queue.backend rabbitmq), up to `workers` at once, until SIGTERM."""
    _run(_load(config), "worker")


@app.command()
def status(config: ConfigOption = None) -> None:
    """List runs recorded in the state store, with their status and token use."""
    from coding_agent.runtime.state_store import StateStore

    settings = _load(config, local=True)
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


TaskArgument = Annotated[
    Optional[str], typer.Argument(help="A task key, e.g. 'github:owner/repo#12' or 'gitlab:group/project!34'.")
]


def _task_key(text: str) -> str:
    from coding_agent.domain.tasks import TaskKey

    try:
        return str(TaskKey.parse(text))
    except ValueError as error:
        raise _fail(str(error), 2) from None


async def _continue_runs(config: AgentConfig, only: set[str] | None) -> int:
    from coding_agent.runtime.service import AgentService

    service = AgentService(config)
    _pause_on_signals(service, asyncio.Event())
    try:
        report = await service.continue_runs(only)
        if not report.results and not report.errors:
            typer.echo("nothing to resume now")
        _echo_report(report)
        return 0
    finally:
        await service.aclose()


@app.command()
def pause(task: TaskArgument = None, config: ConfigOption = None) -> None:
    """Pause TASK at its next step, or every task (the pause signal file) without TASK.

    A paused TASK waits for `coding-agent resume TASK`. While the signal file exists,
    running tasks pause and none starts; they resume once it is removed.
    """
    from coding_agent.agent.steering import pause_signal_path

    settings = _load(config, local=True)
    if not settings.pause_resume.enabled:
        raise _fail("pause_resume.enabled is false in the configuration", 2)
    if task is None:
        path = pause_signal_path(settings)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.touch()
        typer.echo(f"pause signal set ({path}): running tasks pause at their next step")
        return
    _act(settings, _task_key(task), "pause")


def _act(settings: AgentConfig, key: str, action: str) -> None:
    """pause/stop TASK through the same code as the dashboard; continue a stopped paused run."""
    from coding_agent.runtime.operator_actions import UnknownTask, apply_action
    from coding_agent.runtime.state_store import StateStore

    store = StateStore(settings.database.url)
    try:
        result = apply_action(store, key, action)  # type: ignore[arg-type]
    except UnknownTask as error:
        raise _fail(str(error), 1) from None
    finally:
        store.close()
    typer.echo(result.message)
    if result.continue_now:
        _exit_with(settings, _continue_runs(settings, {key}))


@app.command()
def resume(
    task: TaskArgument = None,
    queue: Annotated[
        bool, typer.Option("--queue", help="Only lift the pause; a running `serve` or the next `run --once` continues.")
    ] = False,
    config: ConfigOption = None,
) -> None:
    """Lift the pause of TASK (or of everything), then continue paused runs from their next step.

    Without TASK the pause signal file is removed too. With --queue the runs are left to
    a running `serve` or the next `run --once`.
    """
    from coding_agent.agent.steering import pause_signal_path
    from coding_agent.runtime.state_store import StateStore

    settings = _load(config, local=queue)
    path = pause_signal_path(settings)
    key = _task_key(task) if task is not None else None
    store = StateStore(settings.database.url)
    try:
        if key is None and path.exists():
            path.unlink()
            typer.echo(f"pause signal removed ({path})")
        store.release_holds(key)
        paused = store.runs_with_status("paused", key)
    finally:
        store.close()
    if key is not None and not paused:
        typer.echo(f"{key} has no paused run")
    if key is not None and path.exists():
        typer.echo(f"note: the pause signal {path} is present; nothing resumes until it is removed")
    if not queue:
        _exit_with(settings, _continue_runs(settings, {key} if key else None))


@app.command()
def stop(task: Annotated[str, typer.Argument(help="The task key to stop.")], config: ConfigOption = None) -> None:
    """Stop TASK for good, as unassigning the bot does (stop comment, stopped label).

    A running run stops at its next step; a paused one is stopped now.
    """
    _act(_load(config), _task_key(task), "stop")


memory_app = typer.Typer(help="What the agent remembers of each repository (SPEC 9.2).", no_args_is_help=True)
app.add_typer(memory_app, name="memory")
RepoArgument = Annotated[
    Optional[str], typer.Argument(help="A repository: 'owner/repo', or 'github:owner/repo' / 'gitlab:group/project'.")
]


@memory_app.command("list")
def memory_list(repo: RepoArgument = None, config: ConfigOption = None) -> None:
    """Show the memories of REPO (or of every repository)."""
    import time

    from coding_agent.context.memory_admin import memory_listing
    from coding_agent.runtime.memory_store import MemoryStore
    from coding_agent.runtime.state_store import StateStore

    settings = _load(config, local=True)
    store = StateStore(settings.database.url)
    try:
        lines = memory_listing(MemoryStore(store.engine), repo, settings.memory.active_channel_days, time.time())
    finally:
        store.close()
    typer.echo("\n".join(lines))


@memory_app.command("clear")
def memory_clear(
    repo: RepoArgument = None,
    yes: Annotated[bool, typer.Option("--yes", help="Clear every repository's memories without asking.")] = False,
    config: ConfigOption = None,
) -> None:
    """Forget the memories of REPO (without REPO: of every repository, after confirmation)."""
    from coding_agent.context.memory_admin import clear_memories
    from coding_agent.runtime.memory_store import MemoryStore
    from coding_agent.runtime.state_store import StateStore

    settings = _load(config, local=True)
    if repo is None and not yes and not typer.confirm("Forget every repository's memories?", default=False):
        raise _fail("nothing cleared", 1)
    store = StateStore(settings.database.url)
    try:
        channels, rows = clear_memories(MemoryStore(store.engine), repo)
    finally:
        store.close()
    if repo is not None and channels == 0:
        raise _fail(f"no memories of {repo}", 1)
    typer.echo(f"cleared the memories of {channels} repositor{'y' if channels == 1 else 'ies'} ({rows} record(s))")


cache_app = typer.Typer(help="The setup cache (SPEC 7.1: setup.cache).", no_args_is_help=True)
app.add_typer(cache_app, name="cache")


@cache_app.command("clear")
def cache_clear(config: ConfigOption = None) -> None:
    """Remove every cached setup: the next run of each repository runs its setup again."""
    from coding_agent.workspace.setup_cache import SetupCache

    settings = _load(config)
    removed = SetupCache(Path(settings.setup.cache_dir)).clear()
    typer.echo(f"removed {removed} cached setup(s) from {settings.setup.cache_dir}")


@app.command()
def cleanup(config: ConfigOption = None) -> None:
    """Remove completed contexts (and thread memories) older than context_storage.cleanup_days."""
    from coding_agent.runtime.cleanup import Cleanup
    from coding_agent.runtime.state_store import StateStore

    settings = _load(config)
    store = StateStore(settings.database.url)
    try:
        report = Cleanup(settings, store).run()
    finally:
        store.close()
    typer.echo(
        f"removed {report.contexts_removed} completed context(s) and {report.thread_memories_removed} thread memorie(s)"
        f" older than {settings.context_storage.cleanup_days:g} day(s)"
    )


@app.command()
def doctor(config: ConfigOption = None) -> None:
    """Check the deployment, one line per check: config, forge tokens, LLM, MCP servers,
    sandbox, database, queue. Exit 0 when all pass, 1 otherwise. Prints no secret."""
    from coding_agent.runtime.checks import run_doctor

    path = _config_path(config)
    settings = _load(config)
    checks = asyncio.run(run_doctor(settings, str(path)))
    for check in checks:
        typer.echo(check.line())
    raise typer.Exit(0 if all(check.ok for check in checks) else 1)


@app.command("config-reference")
def config_reference(
    write: Annotated[
        Optional[Path], typer.Option("--write", help="Replace the generated section of this file (README.md).")
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
        raise _fail(str(error), 2) from None
    typer.echo(f"{write}: config reference {'updated' if changed else 'already up to date'}")


@app.command("mcp-workspace")
def mcp_workspace(
    root: Annotated[Path, typer.Option("--root", help="The workspace directory the tools may touch.")],
    sandbox: Annotated[str, typer.Option("--sandbox", help="bwrap (default) or none.")] = "bwrap",
) -> None:
    """Run the built-in workspace MCP server on stdio (started by the agent for each run)."""
    from coding_agent.tools.workspace_server import main as workspace_main

    workspace_main(["--root", str(root), "--sandbox", sandbox])


@app.command()
def demo(
    llm: Annotated[bool, typer.Option("--llm", help="Use the model configured in --config instead of the replay model.")] = False,
    config: ConfigOption = None,
    keep: Annotated[Optional[Path], typer.Option("--dir", help="Keep the demo's files in this directory.")] = None,
    planning: Annotated[bool, typer.Option("--planning", help="Work the task in planning mode (plan, act, reflect, verify).")] = False,
) -> None:
    """Run one whole task on a built-in sandbox forge with the real MCP workspace server."""
    from coding_agent.demo import run_demo

    llm_config = _load(config).llm if llm else None
    raise typer.Exit(run_demo(llm_config, keep, planning))


def main() -> None:  # pragma: no cover - console entry point
    app()


if __name__ == "__main__":  # pragma: no cover
    sys.exit(app())

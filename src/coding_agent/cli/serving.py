"""The commands that run the agent (`run`, `serve`, `producer`, `worker`) and what they
share with `resume`: the preflight, starting the service with its database and queue
reachable, pausing on signals, printing a cycle's report."""

from __future__ import annotations

import asyncio
import logging
import os
import sys
from typing import TYPE_CHECKING, Annotated, Literal, NoReturn

import typer

from coding_agent.cli.common import ConfigOption, Unreachable, exit_with, fail, load, log
from coding_agent.config import AgentConfig

if TYPE_CHECKING:
    from coding_agent.runtime.service import AgentService, CycleReport
    from coding_agent.runtime.shutdown import GracefulShutdown

Role = Literal["once", "serve", "producer", "worker"]


async def _preflight(config: AgentConfig, once: bool, stop: asyncio.Event) -> bool:
    """Check the forge and the LLM before claiming anything (SPEC 11). `run --once`: False
    when one fails (each named on stderr). `serve`: wait, retrying with backoff, until
    it passes (True) or `stop` is set (False)."""
    from coding_agent.cli.checks import preflight

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
        except TimeoutError:
            pass
        delay = min(delay * 2, 300.0)
    return False


async def _start_service(config: AgentConfig) -> AgentService:
    """The service with its database and queue reachable, or `Unreachable` naming which."""
    from sqlalchemy.exc import SQLAlchemyError

    from coding_agent.runtime.service import AgentService

    try:
        service = AgentService(config)
    except SQLAlchemyError as error:
        cause = getattr(error, "orig", None) or error  # a DBAPIError's driver error
        raise Unreachable(f"the database (database.url) is not usable: {type(cause).__name__}") from None
    try:
        await service.queue()
    except (TimeoutError, OSError, ConnectionError) as error:
        await service.aclose()
        backend = config.queue.backend
        raise Unreachable(f"the queue (queue.url, backend {backend}) is not reachable: {type(error).__name__}") from None
    except Exception as error:  # aio-pika's own connection errors
        await service.aclose()
        if type(error).__module__.startswith(("aio_pika", "aiormq", "pamqp")):
            raise Unreachable(f"the queue (queue.url) is not reachable: {type(error).__name__}") from None
        raise
    return service


class _StartAfresh(Exception):
    """`serve`/`worker` stopped taking work, with none in progress, to start afresh
    (`scheduling.restart_after_runs`); raised once the service is closed."""


async def _run_service(config: AgentConfig, role: Role) -> int:
    service = await _start_service(config)
    stop = asyncio.Event()
    shutdown = pause_on_signals(service, stop)
    try:
        code = await shutdown.guard(_work(config, role, service, stop))
    finally:
        await shutdown.close()
    if service.restart_due:
        raise _StartAfresh
    shutdown.exit_if_shut_down(code)
    return code


async def _work(config: AgentConfig, role: Role, service: AgentService, stop: asyncio.Event) -> int:
    if not await _preflight(config, role == "once", stop):
        return 1 if role == "once" else 0
    if role == "once":
        echo_report(await service.run_cycle())
        return 0
    if role == "worker":  # no HTTP: many workers may share a machine
        await service.work(stop)
    else:
        from coding_agent.web.server import BindError, serving_http

        try:
            async with serving_http(config, service) as url:
                if url:
                    typer.echo(f"coding-agent: dashboard at {url}", err=True)
                await (service.produce(stop) if role == "producer" else service.serve(stop))
        except BindError as error:
            raise Unreachable(str(error)) from None
    return 0


def _start_afresh() -> NoReturn:
    """Replace this process's image with a new start of the same command line.

    The pid stays (a service manager or a container's runtime sees no exit), and so do
    the environment, the working directory and the listening socket (handed down by
    `web.server`); everything the old image allocated goes back to the system. Every
    task's state is in the store and no run is in progress, so the new image's start
    (preflight, recovery, the first poll) picks up where this one stopped."""
    log.info("starting afresh (scheduling.restart_after_runs): %s", " ".join(sys.orig_argv))
    logging.shutdown()
    sys.stdout.flush()
    sys.stderr.flush()
    try:
        os.execv(sys.executable, sys.orig_argv)
    except OSError as error:  # the interpreter gone (an upgrade under it): a service manager restarts it
        raise fail(f"could not start afresh: {sys.executable}: {error.strerror or error}", 1) from None


def pause_on_signals(service: AgentService, stop: asyncio.Event) -> GracefulShutdown:
    """The first SIGTERM/SIGINT stops polling and pauses the running tasks at their next
    step, within `scheduling.shutdown_grace_seconds` (SPEC 8.3); a second one ends the
    process at once (the tasks are then taken over after their lease expires)."""
    from coding_agent.runtime.shutdown import GracefulShutdown

    shutdown = GracefulShutdown(service, stop)
    shutdown.install()
    return shutdown


def echo_report(report: CycleReport) -> None:
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
        raise fail(str(error), 2) from None
    if warning is not None:
        log.warning("%s", warning)


def _run(config: AgentConfig, role: Role) -> None:
    if role in ("producer", "worker") and config.queue.backend == "memory":
        raise fail(f"`{role}` needs a shared queue: set queue.backend to rabbitmq (or use `serve`)", 2)
    if role != "producer":
        _check_sandbox(config)
    try:
        exit_with(config, _run_service(config, role))
    except _StartAfresh:
        _start_afresh()


async def continue_runs(config: AgentConfig, only: set[str] | None) -> int:
    """Continue the paused (or stopped-while-paused) runs in `only` (None: every one)."""
    from coding_agent.runtime.service import AgentService

    service = AgentService(config)
    shutdown = pause_on_signals(service, asyncio.Event())

    async def resume() -> int:
        report = await service.continue_runs(only)
        if not report.results and not report.errors:
            typer.echo("nothing to resume now")
        echo_report(report)
        return 0

    try:
        code = await shutdown.guard(resume())
    finally:
        await shutdown.close()
    shutdown.exit_if_shut_down(code)
    return code


def run(
    config: ConfigOption = None,
    once: Annotated[bool, typer.Option("--once", help="Work every pending task, then exit (for cron).")] = False,
) -> None:
    """Work pending tasks: once with --once, else poll every scheduling.interval_seconds."""
    _run(load(config), "once" if once else "serve")


def serve(config: ConfigOption = None) -> None:
    """Producer and workers in one process: poll, and work up to `workers` tasks at once,
    each starting as soon as a slot is free, until SIGTERM/SIGINT."""
    _run(load(config), "serve")


def producer(config: ConfigOption = None) -> None:
    """Only find work and queue it (queue.backend rabbitmq), every scheduling.interval_seconds."""
    _run(load(config), "producer")


def worker(config: ConfigOption = None) -> None:
    """Only work queued tasks (queue.backend rabbitmq), up to `workers` at once, until SIGTERM."""
    _run(load(config), "worker")

"""Serving the HTTP app beside the runtime, on `dashboard.bind` (SPEC 11.3).

The socket is bound here, before uvicorn starts, so an address in use is a clear
warning naming `dashboard.bind` and the process goes on working tasks (the tasks are the
job, the dashboard a view of them) instead of uvicorn's exit on a failed bind.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import socket
from collections.abc import AsyncIterator

import uvicorn
from starlette.middleware import Middleware

from coding_agent.config import AgentConfig
from coding_agent.redaction import Redactor
from coding_agent.runtime.state_store import StateStore
from coding_agent.web.api import api_routes
from coding_agent.web.app import build_app
from coding_agent.web.auth import TokenGuard, login_routes
from coding_agent.web.dashboard import dashboard_routes
from coding_agent.web.metrics import health_routes

__all__ = ["dashboard_app", "serving_dashboard"]

log = logging.getLogger(__name__)


def dashboard_app(config: AgentConfig, store: StateStore):  # type: ignore[no-untyped-def]
    """The dashboard's app: pages, API, health and metrics, behind the token guard."""
    redactor = Redactor(config.secrets())
    settings = config.dashboard
    token = None if settings.local_only or settings.token is None else settings.token.get_secret_value()
    return build_app(
        health_routes(store),
        api_routes(store, redactor),
        login_routes(token),
        dashboard_routes(store, redactor),
        middleware=[Middleware(TokenGuard, token=token)],  # type: ignore[arg-type]
    )


class _Server(uvicorn.Server):
    """uvicorn without its signal handlers: SIGTERM/SIGINT belong to the CLI, which pauses
    the running tasks first (SPEC 8.3)."""

    @contextlib.contextmanager
    def capture_signals(self):  # type: ignore[no-untyped-def,override]
        yield

    def install_signal_handlers(self) -> None:  # older uvicorn
        return None


def _bind(bind: str, host: str, port: int) -> socket.socket | None:
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, port))
    except OSError as error:
        sock.close()
        log.warning("dashboard.bind %s: %s; working tasks without the dashboard", bind, error.strerror or error)
        return None
    sock.listen(128)
    sock.setblocking(False)
    return sock


@contextlib.asynccontextmanager
async def serving_dashboard(config: AgentConfig, store: StateStore) -> AsyncIterator[str | None]:
    """Serve the dashboard while the block runs; yields its URL, or None when it is off
    or its address is taken."""
    settings = config.dashboard
    if not settings.enabled:
        yield None
        return
    host, port = settings.host_port
    sock = _bind(settings.bind, host, port)
    if sock is None:
        yield None
        return
    server = _Server(uvicorn.Config(dashboard_app(config, store), log_level="warning", lifespan="off"))
    task = asyncio.create_task(server.serve(sockets=[sock]))
    bound = sock.getsockname()
    url = f"http://{host if ':' not in host else f'[{host}]'}:{bound[1]}"
    log.info("dashboard at %s", url)
    try:
        yield url
    finally:
        server.should_exit = True
        with contextlib.suppress(Exception):
            await asyncio.wait_for(task, 10)
        sock.close()

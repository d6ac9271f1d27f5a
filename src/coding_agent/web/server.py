"""Serving the HTTP app beside the runtime, on `dashboard.bind` (SPEC 11.2, 11.3).

One app, one socket: the dashboard's pages and API (when `dashboard.enabled`) and the
webhooks (when a webhook secret is set). The socket is bound here, before uvicorn
starts, so an address in use is handled as the SPEC says instead of uvicorn's exit on a
failed bind: without webhooks, one warning naming `dashboard.bind` and the process goes
on working tasks (the dashboard is a view of them); with webhooks, `BindError` (the CLI
exits 2 naming `dashboard.bind`), since a missed delivery is missed work.

When the process starts afresh (`scheduling.restart_after_runs`: the CLI replaces its
image, same pid), the listening socket is handed down to the new image rather than closed
and bound again: a delivery that arrives meanwhile waits in the socket's backlog and is
answered once the new image serves, instead of being refused.
"""

from __future__ import annotations

import asyncio
import contextlib
import ipaddress
import logging
import os
import socket
from collections.abc import AsyncIterator, Callable, Sequence
from pathlib import Path

import uvicorn
from starlette.applications import Starlette
from starlette.middleware import Middleware
from starlette.routing import BaseRoute

from coding_agent.config import AgentConfig
from coding_agent.redaction import Redactor
from coding_agent.runtime.budgets import Budgets
from coding_agent.runtime.service import AgentService
from coding_agent.runtime.webhook_sink import RuntimeWebhookSink
from coding_agent.store.deliveries import DeliveryLog
from coding_agent.store.state import StateStore
from coding_agent.web.activity import RunActivity
from coding_agent.web.api import api_routes
from coding_agent.web.app import build_app, closing_event
from coding_agent.web.auth import TokenGuard, login_routes
from coding_agent.web.dashboard import dashboard_routes
from coding_agent.web.feed import ListFeed
from coding_agent.web.metrics import health_routes
from coding_agent.web.same_origin import SameOriginGuard
from coding_agent.web.uvicorn_config import uvicorn_config
from coding_agent.web.views import task_list
from coding_agent.web.webhooks import warm_up, webhook_routes

__all__ = [
    "BindError",
    "bind_socket",
    "dashboard_app",
    "serving_dashboard",
    "serving_http",
    "webhooks_configured",
]

log = logging.getLogger(__name__)

# "<pid>:<fd>": the listening socket a process handed down to its next image (same pid).
HANDED_DOWN_SOCKET = "CODING_AGENT_LISTENING_SOCKET"


class BindError(Exception):
    """`dashboard.bind` cannot be listened on while webhooks need it."""


def webhooks_configured(config: AgentConfig) -> bool:
    hooks = config.webhooks
    return any(secret is not None and secret.get_secret_value() for secret in (hooks.github_secret, hooks.gitlab_token))


def _dashboard_routes(
    config: AgentConfig, store: StateStore, shutting_down: Callable[[], bool] = lambda: False
) -> list[Sequence[BaseRoute]]:
    redactor = Redactor(config.secrets())
    token = _token(config)
    activity = RunActivity(Path(config.context_storage.base_dir), redactor, config.planning.max_steps_per_action)
    feed = ListFeed(lambda: task_list(store, redactor, activity))  # one list for the pages and the API
    budgets = Budgets(config, store.spend, redactor)
    return [
        health_routes(store, shutting_down=shutting_down),
        api_routes(store, redactor, activity, feed, budgets),
        login_routes(token),
        dashboard_routes(store, redactor, activity, feed, budgets),
    ]


def _token(config: AgentConfig) -> str | None:
    settings = config.dashboard
    return None if settings.local_only or settings.token is None else settings.token.get_secret_value()


def _app(config: AgentConfig, route_lists: list[Sequence[BaseRoute]]) -> Starlette:
    # The guards let /webhooks/ through: a forge cannot send the dashboard's token,
    # nor comes from its origin or Host, and every delivery is verified by its own signature.
    guards = [Middleware(SameOriginGuard, settings=config.dashboard), Middleware(TokenGuard, token=_token(config))]
    return build_app(*route_lists, middleware=guards)  # type: ignore[arg-type]


def dashboard_app(config: AgentConfig, store: StateStore) -> Starlette:
    """The dashboard's app: pages, API, health and metrics, behind the token guard."""
    return _app(config, _dashboard_routes(config, store))


class _Server(uvicorn.Server):
    """uvicorn without its signal handlers: SIGTERM/SIGINT belong to the CLI, which pauses
    the running tasks first (SPEC 8.3)."""

    @contextlib.contextmanager
    def capture_signals(self):  # type: ignore[no-untyped-def,override]
        yield

    def install_signal_handlers(self) -> None:  # older uvicorn
        return None


def bind_socket(host: str, port: int) -> socket.socket:
    """A listening socket on host:port; OSError when the address is in use."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, port))
    except OSError:
        sock.close()
        raise
    sock.listen(128)
    sock.setblocking(False)
    return sock


def _hand_down(sock: socket.socket) -> None:
    """Keep `sock` listening across the coming `exec` of this process: a copy of it that
    the new image inherits, named in the environment it inherits."""
    kept = os.dup(sock.fileno())
    os.set_inheritable(kept, True)
    os.environ[HANDED_DOWN_SOCKET] = f"{os.getpid()}:{kept}"


def _handed_down(host: str, port: int) -> socket.socket | None:
    """The listening socket this process's previous image handed down (`_hand_down`), if it
    listens where `dashboard.bind` says; None otherwise (it is then closed, and the caller
    binds anew: the configuration may have changed in between)."""
    named = os.environ.pop(HANDED_DOWN_SOCKET, "")
    pid, _, fd = named.partition(":")
    if pid != str(os.getpid()) or not fd.isdigit():  # not ours: set by hand, or by a parent
        return None
    try:
        sock = socket.socket(fileno=int(fd))
    except OSError:
        return None
    try:
        listening = sock.type == socket.SOCK_STREAM and sock.getsockopt(socket.SOL_SOCKET, socket.SO_ACCEPTCONN)
        bound_host, bound_port = sock.getsockname()[:2]
    except (OSError, TypeError, ValueError):
        listening, bound_host, bound_port = False, "", -1
    if listening and port in (0, bound_port) and _same_host(host, bound_host):
        sock.set_inheritable(False)
        sock.setblocking(False)
        return sock
    sock.close()
    return None


def _same_host(configured: str, bound: str) -> bool:
    try:
        return ipaddress.ip_address(configured) == ipaddress.ip_address(bound)
    except ValueError:  # a name (localhost): what it resolved to when it was bound
        return True


@contextlib.asynccontextmanager
async def _serving(app: Starlette, sock: socket.socket) -> AsyncIterator[str]:
    server = _Server(uvicorn_config(app))
    task = asyncio.create_task(server.serve(sockets=[sock]))
    host, port = sock.getsockname()[:2]
    url = f"http://{host if ':' not in host else f'[{host}]'}:{port}"
    try:
        yield url
    finally:
        closing_event(app).set()
        server.should_exit = True
        with contextlib.suppress(Exception):
            await asyncio.wait_for(task, 10)
        sock.close()


@contextlib.asynccontextmanager
async def serving_http(
    config: AgentConfig, service: AgentService, sock: socket.socket | None = None
) -> AsyncIterator[str | None]:
    """Serve the dashboard and the webhooks of `service` while the block runs; yields the
    URL, or None when neither is on (or, without webhooks, the address is taken).

    `sock`: an already bound socket (tests bind port 0); by default `dashboard.bind`, or
    the socket the process's previous image listened on, when it started afresh.
    """
    route_lists = _dashboard_routes(config, service.store, service.shutdown.is_set) if config.dashboard.enabled else []
    hooks = webhooks_configured(config)
    if hooks:
        if config.webhooks.github_secret is not None and config.webhooks.github_secret.get_secret_value():
            await asyncio.to_thread(warm_up)
        queue = await service.queue()
        sink = RuntimeWebhookSink(
            DeliveryLog(service.store.engine),
            service.controls,
            service.store.steering,
            service.producer,
            lambda: queue,
            service.ci,
        )
        route_lists.append(webhook_routes(config, sink))
    host, port = config.dashboard.host_port
    handed_down = _handed_down(host, port)  # this image follows a restart in place
    if handed_down is not None and (sock is not None or not route_lists):
        handed_down.close()
    elif sock is None:
        sock = handed_down
    if not route_lists:
        yield None
        return
    if sock is None:
        try:
            sock = bind_socket(host, port)
        except OSError as error:
            if hooks:
                raise BindError(f"dashboard.bind {config.dashboard.bind} cannot be used for the webhooks: {error.strerror}") from None
            log.warning("dashboard.bind %s: %s; working tasks without the dashboard", config.dashboard.bind, error.strerror or error)
            yield None
            return
    async with _serving(_app(config, route_lists), sock) as url:
        log.info("serving %s at %s", "dashboard and webhooks" if hooks and config.dashboard.enabled else "webhooks" if hooks else "dashboard", url)
        try:
            yield url
        finally:
            if service.restart_due:
                _hand_down(sock)


@contextlib.asynccontextmanager
async def serving_dashboard(config: AgentConfig, store: StateStore) -> AsyncIterator[str | None]:
    """The dashboard alone (no webhooks): yields its URL, or None when it is off or its
    address is taken."""
    if not config.dashboard.enabled:
        yield None
        return
    host, port = config.dashboard.host_port
    try:
        sock = bind_socket(host, port)
    except OSError as error:
        log.warning("dashboard.bind %s: %s; working tasks without the dashboard", config.dashboard.bind, error.strerror or error)
        yield None
        return
    async with _serving(dashboard_app(config, store), sock) as url:
        log.info("dashboard at %s", url)
        yield url

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
answered once the new image serves, instead of being refused. The new image keeps it only
when it listens exactly where the configuration it read binds (address family, resolved
address, port); otherwise it closes it and binds anew, so a narrowed `dashboard.bind`
takes effect at the restart (SPEC 15). For the same reason the dashboard's token is
required by what the socket actually listens on as well as by the configuration.
"""

from __future__ import annotations

import asyncio
import contextlib
import ipaddress
import logging
import os
import secrets
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
from coding_agent.runtime.slack_intake import SlackIntake
from coding_agent.runtime.webhook_sink import RuntimeWebhookSink
from coding_agent.sources.slack import SlackChat
from coding_agent.store.deliveries import DeliveryLog
from coding_agent.store.state import StateStore
from coding_agent.web.activity import RunActivity
from coding_agent.web.api import api_routes
from coding_agent.web.app import build_app, closing_event
from coding_agent.web.auth import TokenGuard, login_routes
from coding_agent.web.dashboard import dashboard_routes
from coding_agent.web.feed import ListFeed
from coding_agent.web.metrics import health_routes
from coding_agent.web.request_body import BodyReader
from coding_agent.web.same_origin import SameOriginGuard
from coding_agent.web.slack_events import slack_routes, slack_socket_mode
from coding_agent.web.uvicorn_config import uvicorn_config
from coding_agent.web.views import task_list
from coding_agent.web.webhooks import warm_up, webhook_routes

__all__ = [
    "BindError",
    "bind_socket",
    "dashboard_app",
    "listening_beyond_loopback",
    "resolve_bind",
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
    slack = config.chat.slack.signing_secret if config.chat.slack is not None else None
    return any(secret is not None and secret.get_secret_value() for secret in (hooks.github_secret, hooks.gitlab_token, slack))


def _dashboard_routes(
    config: AgentConfig,
    store: StateStore,
    token: str | None,
    reader: BodyReader,
    shutting_down: Callable[[], bool] = lambda: False,
) -> list[Sequence[BaseRoute]]:
    redactor = Redactor(config.secrets())
    activity = RunActivity(Path(config.context_storage.base_dir), redactor, config.planning.max_steps_per_action)
    feed = ListFeed(lambda: task_list(store, redactor, activity))  # one list for the pages and the API
    budgets = Budgets(config, store.spend, redactor)
    return [
        health_routes(store, shutting_down=shutting_down),
        api_routes(store, redactor, activity, feed, budgets, reader),
        login_routes(token, reader),
        dashboard_routes(store, redactor, activity, feed, budgets),
    ]


def _token(config: AgentConfig, sock: socket.socket) -> str | None:
    """The token the dashboard requires on `sock`, None when it requires none.

    Required unless both the configuration (`bind` and `public_url`) and the socket
    actually listening are local: a name that resolved to a wider address, or a socket
    listening wider than the configuration says, never opens the dashboard (SPEC 15).
    Required with none configured (only such a resolution can get there): a token nobody
    holds, so every dashboard request is refused rather than served to the network."""
    settings = config.dashboard
    if not settings.enabled or (settings.local_only and not listening_beyond_loopback(sock)):
        return None
    if settings.token is not None and settings.token.get_secret_value():
        return settings.token.get_secret_value()
    log.error(
        "dashboard.bind %s listens on %s, beyond localhost, and dashboard.token is not set: "
        "every dashboard request is refused until it is",
        settings.bind,
        sock.getsockname()[0],
    )
    return secrets.token_urlsafe(32)


def _app(config: AgentConfig, route_lists: list[Sequence[BaseRoute]], token: str | None) -> Starlette:
    # The guards let /webhooks/ through: a forge cannot send the dashboard's token,
    # nor comes from its origin or Host, and every delivery is verified by its own signature.
    guards = [Middleware(SameOriginGuard, settings=config.dashboard), Middleware(TokenGuard, token=token)]
    return build_app(*route_lists, middleware=guards)


def dashboard_app(config: AgentConfig, store: StateStore, sock: socket.socket) -> Starlette:
    """The dashboard's app served on `sock`: pages, API, health and metrics, behind the
    token guard."""
    token = _token(config, sock)
    reader = BodyReader(config.webhooks.body_timeout_seconds)
    return _app(config, _dashboard_routes(config, store, token, reader), token)


class _Server(uvicorn.Server):
    """uvicorn without its signal handlers: SIGTERM/SIGINT belong to the CLI, which pauses
    the running tasks first (SPEC 8.3)."""

    @contextlib.contextmanager
    def capture_signals(self):
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


def _handed_down() -> socket.socket | None:
    """The listening socket this process's previous image handed down (`_hand_down`), if
    any; the name is read once, so the runs' commands never inherit it."""
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
    except OSError:
        listening = False
    if not listening:
        sock.close()
        return None
    sock.set_inheritable(False)
    sock.setblocking(False)
    return sock


def resolve_bind(host: str, port: int) -> tuple[socket.AddressFamily, str]:
    """The address family and the numeric address that `host` (`dashboard.bind`: an
    address or a name such as localhost) is bound on; OSError when it does not resolve.

    One resolution for binding and for judging a handed-down socket, so "the same
    address" means the address a bind would use, never the configured spelling."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    found = socket.getaddrinfo(host, port, family, socket.SOCK_STREAM, 0, socket.AI_PASSIVE)
    return family, str(found[0][4][0])


def _listens_at(sock: socket.socket, family: socket.AddressFamily, address: str, port: int) -> bool:
    """`sock` listens exactly at family/address/port (`port` 0: any port, as a bind to 0
    would pick one)."""
    try:
        bound_address, bound_port = sock.getsockname()[:2]
        same_address = _ip(bound_address) == _ip(address)
    except (OSError, TypeError, ValueError):
        return False
    return sock.family == family and same_address and port in (0, bound_port)


def _ip(address: str) -> ipaddress.IPv4Address | ipaddress.IPv6Address:
    return ipaddress.ip_address(address.split("%", 1)[0])


def _kept_or_bound(handed_down: socket.socket | None, host: str, port: int) -> socket.socket:
    """The handed-down socket when it listens exactly where `host:port` resolves now, else
    a new socket bound there (the handed-down one closed first: the port may be the same).
    A restart after the operator narrowed `dashboard.bind` thus never keeps listening on
    the wider address (SPEC 15). OSError when the address cannot be resolved or bound."""
    try:
        family, address = resolve_bind(host, port)
    except OSError:
        if handed_down is not None:
            handed_down.close()
        raise
    if handed_down is not None:
        if _listens_at(handed_down, family, address, port):
            return handed_down
        log.info("dashboard.bind %s: the socket from before the restart listens elsewhere; binding anew", f"{host}:{port}")
        handed_down.close()
    return bind_socket(address, port)


def listening_beyond_loopback(sock: socket.socket) -> bool:
    """Whether `sock` accepts connections from other machines (not a loopback address)."""
    try:
        address = _ip(sock.getsockname()[0])
    except (OSError, ValueError):
        return True
    mapped = getattr(address, "ipv4_mapped", None)
    return not (address.is_loopback or (mapped is not None and mapped.is_loopback))


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


def _slack_intake(config: AgentConfig, service: AgentService) -> SlackIntake:
    slack = config.chat.slack
    assert slack is not None
    return SlackIntake(
        slack, SlackChat(slack, service.redactor), service.sources, DeliveryLog(service.store.engine), config.language
    )


@contextlib.asynccontextmanager
async def serving_http(
    config: AgentConfig, service: AgentService, sock: socket.socket | None = None
) -> AsyncIterator[str | None]:
    """Serve the dashboard, the webhooks and Slack's events of `service` while the block
    runs (Socket Mode, with `chat.slack.app_token`, needs no listening socket); yields the
    URL, or None when neither the dashboard nor a webhook is on."""
    slack = config.chat.slack
    async with contextlib.AsyncExitStack() as stack:
        if slack is not None and slack.app_token is not None and slack.app_token.get_secret_value():
            intake = _slack_intake(config, service)
            stack.push_async_callback(intake.chat.aclose)
            await stack.enter_async_context(slack_socket_mode(slack, intake))
        yield await stack.enter_async_context(_serving_http(config, service, sock))


@contextlib.asynccontextmanager
async def _serving_http(
    config: AgentConfig, service: AgentService, sock: socket.socket | None = None
) -> AsyncIterator[str | None]:
    """Serve the dashboard and the webhooks of `service` while the block runs; yields the
    URL, or None when neither is on (or, without webhooks, the address is taken).

    `sock`: an already bound socket (tests bind port 0); by default `dashboard.bind`, or
    the socket the process's previous image listened on, when it started afresh.
    """
    hooks = webhooks_configured(config)
    needed = config.dashboard.enabled or hooks
    handed_down = _handed_down()  # this image follows a restart in place
    if handed_down is not None and (sock is not None or not needed):
        handed_down.close()
        handed_down = None
    if not needed:
        yield None
        return
    if sock is None:
        host, port = config.dashboard.host_port
        try:
            sock = await asyncio.to_thread(_kept_or_bound, handed_down, host, port)
        except OSError as error:
            reason = error.strerror or str(error)
            if hooks:
                raise BindError(f"dashboard.bind {config.dashboard.bind} cannot be used for the webhooks: {reason}") from None
            log.warning("dashboard.bind %s: %s; working tasks without the dashboard", config.dashboard.bind, reason)
            yield None
            return
    try:
        token = _token(config, sock)
        reader = BodyReader(config.webhooks.body_timeout_seconds)  # one for every body read before auth
        route_lists = (
            _dashboard_routes(config, service.store, token, reader, service.shutdown.is_set)
            if config.dashboard.enabled
            else []
        )
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
            route_lists.append(webhook_routes(config, sink, reader))
            slack = config.chat.slack
            if slack is not None and slack.signing_secret is not None and slack.signing_secret.get_secret_value():
                route_lists.append(slack_routes(slack, _slack_intake(config, service), reader))
    except BaseException:
        sock.close()
        raise
    async with _serving(_app(config, route_lists, token), sock) as url:
        serves = "dashboard and webhooks" if hooks and config.dashboard.enabled else "webhooks" if hooks else "dashboard"
        log.info("serving %s at %s", serves, url)
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
        sock = await asyncio.to_thread(_kept_or_bound, None, host, port)
    except OSError as error:
        log.warning("dashboard.bind %s: %s; working tasks without the dashboard", config.dashboard.bind, error.strerror or error)
        yield None
        return
    async with _serving(dashboard_app(config, store, sock), sock) as url:
        log.info("dashboard at %s", url)
        yield url

"""Runs the HTTP app (webhooks, dashboard) beside the producer in one event loop.

The socket is bound here, before uvicorn starts, so an address in use is an error the
CLI can name (`dashboard.bind`, exit 2) rather than uvicorn's own exit.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import socket

import uvicorn
from starlette.applications import Starlette

from coding_agent.config import AgentConfig
from coding_agent.runtime.service import AgentService
from coding_agent.runtime.webhook_sink import DeliveryLog, RuntimeWebhookSink
from coding_agent.web.app import build_app
from coding_agent.web.webhooks import WebhookSink, warm_up, webhook_routes

__all__ = [
    "DEFAULT_BIND",
    "BindError",
    "bind_address",
    "webhooks_configured",
    "bind_socket",
    "serve_http",
    "runtime_app",
    "start_runtime_http",
]

log = logging.getLogger(__name__)

DEFAULT_BIND = "127.0.0.1:8080"


class BindError(Exception):
    """`dashboard.bind` cannot be listened on (in use, not an address of this machine)."""


def bind_address(config: AgentConfig) -> tuple[str, int]:
    """`dashboard.bind` (host:port), shared by the dashboard and the webhooks."""
    text = getattr(getattr(config, "dashboard", None), "bind", None) or DEFAULT_BIND
    host, _, port = str(text).rpartition(":")
    return host.strip("[]") or "127.0.0.1", int(port)


def webhooks_configured(config: AgentConfig) -> bool:
    hooks = config.webhooks
    return any(secret is not None and secret.get_secret_value() for secret in (hooks.github_secret, hooks.gitlab_token))


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


def runtime_app(config: AgentConfig, sink: WebhookSink) -> Starlette:
    return build_app(webhook_routes(config, sink))


async def serve_http(app: Starlette, sock: socket.socket, stop: asyncio.Event) -> None:
    """Serve `app` on `sock` until `stop` is set."""
    server = uvicorn.Server(uvicorn.Config(app, log_level="warning", lifespan="off", access_log=False))
    serving = asyncio.create_task(server.serve(sockets=[sock]))
    waiting = asyncio.create_task(stop.wait())
    await asyncio.wait({serving, waiting}, return_when=asyncio.FIRST_COMPLETED)
    server.should_exit = True
    waiting.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await serving
    sock.close()


async def start_runtime_http(
    config: AgentConfig, service: AgentService, stop: asyncio.Event, sock: socket.socket | None = None
) -> asyncio.Task[None] | None:
    """Serve the webhooks of `service` until `stop`; None when no webhook secret is set.

    `sock`: an already bound socket (tests bind port 0); by default `dashboard.bind`.
    """
    if not webhooks_configured(config):
        return None
    if sock is None:
        host, port = bind_address(config)
        try:
            sock = bind_socket(host, port)
        except OSError as error:
            raise BindError(f"dashboard.bind {host}:{port} cannot be used for the webhooks: {error.strerror}") from None
    if config.webhooks.github_secret is not None and config.webhooks.github_secret.get_secret_value():
        await asyncio.to_thread(warm_up)
    queue = await service.queue()
    sink = RuntimeWebhookSink(DeliveryLog(service.store.engine), service.controls, service.producer, lambda: queue)
    log.info("webhooks served on %s /webhooks/{github,gitlab}", sock.getsockname())
    return asyncio.create_task(serve_http(runtime_app(config, sink), sock, stop))

"""How uvicorn serves the app: its limits against hostile clients, and its logging (SPEC
11.4, 15).

The webhooks face the internet and share the workers' process, so what a client can make
the server hold is bounded: at most MAX_CONNECTIONS connections, request headers of at
most MAX_HEADER_BYTES, a request's headers within REQUEST_HEADERS_SECONDS of the
connection or of the previous response (uvicorn has no such deadline of its own: a
connection sending half a request line and then nothing would be held for good), and an
idle keep-alive connection closed after KEEP_ALIVE_SECONDS.

A connection beyond MAX_CONNECTIONS is not refused (uvicorn's own rule, a 503, would let
a few hundred trickled bodies refuse every delivery, SPEC 15): it takes the place of the
connection that received anything least recently among those still sending a request
(its headers or its body) or idle between requests. Only when every connection is busy
with a response (the dashboard's live pages) does uvicorn answer 503.

Bodies are read by the routes, through `request_body.BodyReader`
(a cap, deadlines and a budget of bytes in flight).

uvicorn's records go through the agent's logging (`logging_setup.py`: the log file, the
redaction filter) rather than uvicorn's default handlers, which print to stderr.
"""

from __future__ import annotations

import asyncio
from typing import Any

import uvicorn
from starlette.types import ASGIApp
from uvicorn.protocols.http.h11_impl import H11Protocol

__all__ = ["MAX_CONNECTIONS", "REQUEST_HEADERS_SECONDS", "uvicorn_config"]

MAX_CONNECTIONS = 512
MAX_HEADER_BYTES = 16 * 1024
REQUEST_HEADERS_SECONDS = 10.0
KEEP_ALIVE_SECONDS = 5


class _H11WithHeadersDeadline(H11Protocol):
    """uvicorn's h11 protocol, closing a connection whose next request's headers have not
    all arrived REQUEST_HEADERS_SECONDS after it opened or after its last response."""

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]  # narrows BaseTransport, as uvicorn's does
        self._last_received = self.loop.time()
        super().connection_made(transport)
        self._arm_headers_deadline()
        if len(self.connections) > MAX_CONNECTIONS:
            self._make_room()

    def data_received(self, data: bytes) -> None:
        self._last_received = self.loop.time()
        super().data_received(data)

    def _receiving(self) -> bool:
        """Waiting on the client: for a request's headers or body, or idle between requests
        (what a slow or stalled client holds); not while a response is being sent."""
        cycle = self.cycle
        return cycle is None or cycle.response_complete or (cycle.more_body and not cycle.response_started)

    def _make_room(self) -> None:
        """Close the connection that received anything least recently among those waiting
        on their client (this one excepted); none: uvicorn's 503 stays the answer."""
        waiting = [
            other
            for other in self.connections
            if other is not self and isinstance(other, _H11WithHeadersDeadline) and other._receiving()
            and not other.transport.is_closing()
        ]
        if waiting:
            min(waiting, key=lambda other: other._last_received).transport.close()

    def on_response_complete(self) -> None:
        super().on_response_complete()
        self._arm_headers_deadline()

    def _arm_headers_deadline(self) -> None:
        self.loop.call_later(REQUEST_HEADERS_SECONDS, self._close_if_no_request_since, self.cycle)

    def _close_if_no_request_since(self, cycle: Any) -> None:
        # A new request (a new cycle) or one still being answered keeps the connection.
        if self.cycle is cycle and (cycle is None or cycle.response_complete) and not self.transport.is_closing():
            self.transport.close()


def uvicorn_config(app: ASGIApp) -> uvicorn.Config:
    """The server's configuration for `app` (lifespan off: the CLI owns start and stop)."""
    return uvicorn.Config(
        app,
        http=_H11WithHeadersDeadline,
        lifespan="off",
        log_config=None,
        log_level="warning",
        access_log=False,
        # uvicorn's 503 (`len(connections) >= limit`) only when no connection could make
        # room (`_make_room`): every one of them busy with a response
        limit_concurrency=MAX_CONNECTIONS + 1,
        h11_max_incomplete_event_size=MAX_HEADER_BYTES,
        timeout_keep_alive=KEEP_ALIVE_SECONDS,
    )

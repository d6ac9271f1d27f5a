"""Run an ASGI app (the sandbox forges, the replay model) on a free loopback port in a thread.

Tests, benchmarks and `coding-agent demo` all start the testing servers this way, so
the code under test talks real HTTP to them, in this process or from a subprocess.
"""

from __future__ import annotations

import socket
import threading
import time
from types import TracebackType
from typing import Any, Self

import uvicorn

__all__ = ["BackgroundServer", "ServedApp"]


class BackgroundServer:
    """Serve `app` on 127.0.0.1 in a daemon thread; `url` is known once `start()` returns."""

    def __init__(self, app: Any, host: str = "127.0.0.1", port: int = 0) -> None:
        self._app = app
        self._host = host
        self._socket = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self._socket.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        # Without TCP_NODELAY a reused keep-alive connection waits ~40 ms per request on
        # Nagle + delayed ACK, which would distort every benchmark.
        self._socket.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self._socket.bind((host, port))
        self.port: int = self._socket.getsockname()[1]
        config = uvicorn.Config(app, log_level="warning", access_log=False, lifespan="off")
        self._server = uvicorn.Server(config)
        self._thread = threading.Thread(target=self._serve, name=f"testing-server-{self.port}", daemon=True)

    @property
    def url(self) -> str:
        return f"http://{self._host}:{self.port}"

    def _serve(self) -> None:
        self._server.run(sockets=[self._socket])

    def start(self, timeout: float = 10.0) -> BackgroundServer:
        self._thread.start()
        deadline = time.monotonic() + timeout
        while not self._server.started:
            if not self._thread.is_alive() or time.monotonic() > deadline:
                raise RuntimeError(f"testing server on port {self.port} did not start")
            time.sleep(0.005)
        return self

    def stop(self) -> None:
        # force_exit: do not wait for requests still in flight. A test that made the
        # server hang on purpose (a latency fault longer than the client's timeout) is
        # done with it; a graceful shutdown would wait out the whole delay.
        self._server.should_exit = True
        self._server.force_exit = True
        self._thread.join(timeout=10)
        self._socket.close()

    def __enter__(self) -> BackgroundServer:
        return self.start()

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()


class ServedApp:
    """Base of the sandboxes (forges, replay model): an app served on loopback in a `with`.

    `url` is known from construction on (the port is bound then); subclasses release
    what else they hold in `_on_stop`.
    """

    def __init__(self, app: Any) -> None:
        self.app = app
        self._server = BackgroundServer(app)

    @property
    def url(self) -> str:
        return self._server.url

    def start(self) -> Self:
        self._server.start()
        return self

    def stop(self) -> None:
        self._server.stop()
        self._on_stop()

    def _on_stop(self) -> None:
        """Release resources beside the server (bare repositories, ...)."""

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()

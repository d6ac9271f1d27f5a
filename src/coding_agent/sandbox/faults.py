"""Fault injection for the testing servers: answer the next N matching requests with an
error status (5xx, 429 with Retry-After), after a delay, or once a test opens a gate
(`hold`), then behave normally again.

`applied=True` is the nastiest real failure of a write: the forge applies the request
(the comment exists) and still answers with the error, as a proxy timing out in front
of a slow GitHub does. A client that blindly retries such a POST duplicates its write.
"""

from __future__ import annotations

import asyncio
import re
import threading
from dataclasses import dataclass
from urllib.parse import unquote_plus

from starlette.requests import Request
from starlette.responses import JSONResponse, Response

__all__ = ["Fault", "FaultInjector"]

# The longest a `hold` keeps a request waiting: a test that never opens its gate fails
# on its own assertion after this, instead of hanging.
HOLD_LIMIT_SECONDS = 60.0


@dataclass
class Fault:
    """`count` requests whose `METHOD path` matches `pattern` (and whose query string
    matches `query`, if given) get `status` (or just `delay`, or just wait for `hold`)."""

    pattern: str
    count: int = 1
    status: int | None = 503
    retry_after: int | None = None  # whole seconds, as HTTP sends it
    delay: float = 0.0
    applied: bool = False  # serve the request first, then answer `status` instead
    query: str | None = None  # a pattern the decoded query string must match too
    hold: threading.Event | None = None  # the request waits until a test sets it


class FaultInjector:
    """Thread-safe list of pending faults, consulted by the servers' middleware."""

    def __init__(self) -> None:
        self._faults: list[Fault] = []
        self._lock = threading.Lock()
        self.injected = 0

    def add(self, fault: Fault) -> None:
        with self._lock:
            self._faults.append(fault)

    def clear(self) -> None:
        with self._lock:
            self._faults.clear()

    def _take(self, request: Request) -> Fault | None:
        target = f"{request.method} {request.url.path}"
        query = unquote_plus(request.url.query)
        with self._lock:
            for fault in self._faults:
                if fault.query is not None and not re.search(fault.query, query):
                    continue
                if fault.count > 0 and re.search(fault.pattern, target):
                    fault.count -= 1
                    self.injected += 1
                    return fault
        return None

    async def apply(self, request: Request) -> Response | None:
        """Return the error response to send instead, or None to serve the request.

        A fault with `applied=True` lets the request be served: the server then calls
        `after_serving`, which swaps the real answer for the error.
        """
        fault = self._take(request)
        if fault is None:
            return None
        if fault.delay:
            await asyncio.sleep(fault.delay)
        if fault.hold is not None:
            await asyncio.to_thread(fault.hold.wait, HOLD_LIMIT_SECONDS)
        if fault.status is None:
            return None
        if fault.applied:
            request.state.applied_fault = fault
            return None
        return _error(fault)

    def after_serving(self, request: Request, response: Response) -> Response:
        """The response to send for a served request: the error of an `applied` fault, if any."""
        fault: Fault | None = getattr(request.state, "applied_fault", None)
        return _error(fault) if fault is not None and fault.status is not None else response


def _error(fault: Fault) -> Response:
    headers = {"Retry-After": str(fault.retry_after)} if fault.retry_after is not None else {}
    return JSONResponse({"message": f"injected fault {fault.status}"}, status_code=fault.status or 500, headers=headers)

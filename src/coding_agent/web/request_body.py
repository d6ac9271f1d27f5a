"""Bodies read before the sender is known, read so hostile traffic costs the process little
(SPEC 15): the webhooks, `/login`, and the dashboard's actions (open without a token on
localhost) all read their body through one shared `BodyReader`.

Each body is read after the request's headers were judged (a webhook's signature header,
its delivery id), never beyond its route's cap (413: `Content-Length` over it is refused
before a byte is read, and a chunked body is cut as it crosses it), and within deadlines:
no progress for IDLE_SECONDS, or not whole within the total (`webhooks.body_timeout_seconds`,
10 s), is a 408. A body trickled a byte at a time is thus cut at the total, a stalled one
two seconds after its last byte.

Memory is bounded by the bytes in flight, not by a count of bodies: the bodies being read
share a budget of BYTES_IN_FLIGHT. A chunk that would overflow it is still taken; to make
room, the bodies that made progress least recently are dropped (their buffers freed at
once; the sender gets a 408 at its next byte or deadline). A slow or stalled sender can
therefore only lose its own body: a delivery that arrives whole, as forges send them, is
never made to wait or refused because others stall (the `webhooks.max_concurrent` slots
this replaces did exactly that).

`parse_json` measures the nesting of the bytes before the parser sees them: the C parser
recurses once per level and ends in a RecursionError (a 500) on a deep enough body, so a
body deeper than MAX_JSON_DEPTH is refused without ever being parsed. Webhook payloads
nest about six levels.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import re
from itertools import accumulate
from typing import Any

from starlette.requests import ClientDisconnect, Request

__all__ = [
    "BYTES_IN_FLIGHT",
    "IDLE_SECONDS",
    "MAX_BODY_BYTES",
    "MAX_FORM_BYTES",
    "MAX_JSON_DEPTH",
    "BodyReader",
    "Refusal",
    "json_depth",
    "parse_json",
]

MAX_BODY_BYTES = 1024 * 1024  # a webhook delivery (GitHub caps its payloads at 25 MB, sends far less)
MAX_FORM_BYTES = 16 * 1024  # `/login`'s form, a dashboard action's JSON
IDLE_SECONDS = 2.0
BYTES_IN_FLIGHT = 32 * 1024 * 1024
MAX_JSON_DEPTH = 64

# A JSON string from its opening quote to its closing one, or to the end of a body where
# it is unterminated (possessive: linear time on any input).
_JSON_STRING = re.compile(rb'"(?:[^"\\]++|\\.)*+"?', re.DOTALL)
_NOT_BRACKET = bytes(byte for byte in range(256) if byte not in b"[]{}")
_NESTING_STEP = [0] * 256
for _opening in b"[{":
    _NESTING_STEP[_opening] = 1
for _closing in b"]}":
    _NESTING_STEP[_closing] = -1


class Refusal(Exception):
    """A request answered with `status` and `message` (for the sender) and nothing else."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.message = message


class _InFlight:
    """One body being read: its chunks so far, what they count against the budget, and
    when it last made progress."""

    __slots__ = ("chunks", "dropped", "held", "progress")

    def __init__(self, now: float) -> None:
        self.chunks: list[bytes] = []
        self.held = 0
        self.progress = now
        self.dropped = False


class BodyReader:
    """Reads request bodies under a size cap, the deadlines and the shared byte budget."""

    def __init__(
        self,
        timeout_seconds: float = 10.0,
        idle_seconds: float = IDLE_SECONDS,
        budget_bytes: int = BYTES_IN_FLIGHT,
    ) -> None:
        self._timeout_seconds = timeout_seconds
        self._idle_seconds = min(idle_seconds, timeout_seconds)
        self._budget = budget_bytes
        self._held = 0
        self._reading: set[_InFlight] = set()

    @property
    def bytes_in_flight(self) -> int:
        """The bytes of the bodies being read now (what the budget bounds)."""
        return self._held

    async def read(self, request: Request, cap: int = MAX_BODY_BYTES) -> bytes:
        """The whole raw body; `Refusal` (400, 408, 413) when it cannot be had cheaply."""
        cap = min(cap, self._budget)
        declared = request.headers.get("content-length")
        if declared is not None and not (declared.isascii() and declared.isdigit()):
            raise Refusal(400, "Content-Length is not a number")
        if declared is not None and (len(declared) > 12 or int(declared) > cap):
            raise Refusal(413, f"body over {cap} bytes")
        loop = asyncio.get_running_loop()
        started = loop.time()
        end = started + self._timeout_seconds
        body = _InFlight(started)
        self._reading.add(body)
        stream = request.stream()
        try:
            async with asyncio.timeout(None) as deadline:
                size = 0
                while True:
                    deadline.reschedule(min(end, body.progress + self._idle_seconds))
                    try:
                        chunk = await anext(stream)
                    except StopAsyncIteration:
                        break
                    if body.dropped:
                        raise Refusal(408, "body cut: it made the least progress while the server's buffers for bodies were full")
                    if not chunk:
                        continue
                    size += len(chunk)
                    if size > cap:
                        raise Refusal(413, f"body over {cap} bytes")
                    body.progress = loop.time()
                    self._take(body, len(chunk))
                    body.chunks.append(chunk)
            return b"".join(body.chunks)
        except TimeoutError:
            if loop.time() >= end:
                raise Refusal(408, f"body not received within {self._timeout_seconds:g} s") from None
            raise Refusal(408, f"body made no progress for {self._idle_seconds:g} s") from None
        except ClientDisconnect:
            raise Refusal(400, "the sender closed the connection before the end of the body") from None
        finally:
            self._reading.discard(body)
            self._release(body)
            with contextlib.suppress(Exception):
                await stream.aclose()

    def _take(self, body: _InFlight, size: int) -> None:
        """Count `size` more bytes of `body`; first, while they would overflow the budget,
        drop the other bodies that made progress least recently."""
        while self._held + size > self._budget:
            others = [other for other in self._reading if other is not body and other.held]
            if not others:
                break  # only this body holds bytes, and a body's cap is within the budget
            self._drop(min(others, key=lambda other: other.progress))
        body.held += size
        self._held += size

    def _drop(self, body: _InFlight) -> None:
        body.dropped = True
        body.chunks.clear()
        self._release(body)

    def _release(self, body: _InFlight) -> None:
        self._held -= body.held
        body.held = 0


def json_depth(body: bytes) -> int:
    """The deepest nesting of arrays and objects in `body` (UTF-8 JSON), strings left out.

    Exact up to the first error of a malformed body, which is as far as the parser gets."""
    brackets = _JSON_STRING.sub(b"", body).translate(None, _NOT_BRACKET)
    return max(accumulate(map(_NESTING_STEP.__getitem__, brackets)), default=0)


def parse_json(body: bytes) -> Any:
    """The JSON value of a UTF-8 body; `Refusal` 400 naming the problem otherwise."""
    try:
        text = body.decode("utf-8")
    except UnicodeDecodeError:
        raise Refusal(400, "body is not UTF-8 JSON") from None
    if json_depth(body) > MAX_JSON_DEPTH:
        raise Refusal(400, f"body nests deeper than {MAX_JSON_DEPTH} levels")
    try:
        return json.loads(text)
    except (json.JSONDecodeError, RecursionError):
        raise Refusal(400, "body is not JSON") from None

"""A webhook's body, read and parsed so hostile traffic costs the process little (SPEC 15).

The endpoints check the headers first and then call `BodyReader.read`: at most
`webhooks.max_concurrent` bodies are read at once (one more is refused at once with 503
rather than queued: a queue of stalled readers is the memory the cap is there to save),
each within `webhooks.body_timeout_seconds` as a whole and never beyond MAX_BODY_BYTES,
whatever Content-Length says or when it is absent (chunked). A body that arrives in part
and then stalls is cut off at the deadline instead of holding its buffer and its
connection for good.

`parse_json` measures the nesting of the bytes before the parser sees them: the C parser
recurses once per level and ends in a RecursionError (a 500) on a deep enough body, so a
body deeper than MAX_JSON_DEPTH is refused without ever being parsed. Webhook payloads
nest about six levels.
"""

from __future__ import annotations

import asyncio
import json
import re
from itertools import accumulate
from typing import Any

from starlette.requests import ClientDisconnect, Request

__all__ = ["MAX_BODY_BYTES", "MAX_JSON_DEPTH", "BodyReader", "Refusal", "json_depth", "parse_json"]

MAX_BODY_BYTES = 1024 * 1024
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


class BodyReader:
    """Reads webhook bodies under a shared concurrency cap, a deadline and a size cap."""

    def __init__(self, max_concurrent: int, timeout_seconds: float) -> None:
        self._slots = asyncio.Semaphore(max_concurrent)
        self._timeout_seconds = timeout_seconds

    async def read(self, request: Request) -> bytes:
        """The whole raw body; `Refusal` (413, 503, 408, 400) when it cannot be had cheaply."""
        declared = request.headers.get("content-length")
        if declared is not None and not (declared.isascii() and declared.isdigit()):
            raise Refusal(400, "Content-Length is not a number")
        if declared is not None and (len(declared) > 12 or int(declared) > MAX_BODY_BYTES):
            raise Refusal(413, f"body over {MAX_BODY_BYTES} bytes")
        if self._slots.locked():
            raise Refusal(503, "too many webhook bodies are being received at once; deliver it again later")
        async with self._slots:
            try:
                async with asyncio.timeout(self._timeout_seconds):
                    return await _capped_body(request)
            except TimeoutError:
                raise Refusal(408, f"body not received within {self._timeout_seconds:g} s") from None
            except ClientDisconnect:
                raise Refusal(400, "the sender closed the connection before the end of the body") from None


async def _capped_body(request: Request) -> bytes:
    chunks, size = [], 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > MAX_BODY_BYTES:
            raise Refusal(413, f"body over {MAX_BODY_BYTES} bytes")
        chunks.append(chunk)
    return b"".join(chunks)


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

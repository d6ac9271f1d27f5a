"""The egress proxy's reading of a request head: strict, so that no request hides in one (SPEC 15).

The proxy checks a request and the origin then reads it; wherever the two could read the
same bytes differently, a request the proxy never checked can reach the origin. So every
such ambiguity is refused (400) rather than guessed at:

- a bare LF or CR (an origin that ends a line there sees a header, a second `Host`, that
  the proxy read as part of another header's value);
- a folded line (obs-fold: a continuation that some servers read as a header of its own);
- whitespace before a header's colon, a name that is not a token, a control character in
  a value, a request line that is not `METHOD target HTTP/1.x`;
- a second `Host` or `Content-Length`;
- `Transfer-Encoding` (411): where a chunked body ends is for a second parser to agree on,
  so a body needs a `Content-Length`, and the proxy relays exactly that many bytes.

h11 (the parser under uvicorn and httpx) is not used: it accepts bare LF line ends and
unfolds obs-fold, the two ambiguities this module exists to refuse.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

__all__ = ["MalformedRequest", "RequestHead", "head_end"]

_TOKEN = rb"[!#$%&'*+\-.^_`|~0-9A-Za-z]+"
_REQUEST_LINE = re.compile(rb"(" + _TOKEN + rb") ([\x21-\x7e]+) (HTTP/1\.[01])")
_FIELD = re.compile(rb"(" + _TOKEN + rb"):[ \t]*([\t\x20-\x7e\x80-\xff]*?)[ \t]*")
_LONE_CR_OR_LF = re.compile(rb"\r(?!\n)|(?<!\r)\n")
# The end of a head as any lenient reader would see it (h11, for one, ends a head at
# "\n\r?\n"): a head cut here with a bare LF in it is refused at once, not waited on.
_HEAD_END = re.compile(rb"\r?\n\r?\n")
_SINGLE = ("host", "content-length")
_MAX_CONTENT_LENGTH_DIGITS = 18


class MalformedRequest(ValueError):
    """A request head the proxy refuses to read: `status` (400, 411) and why, for the client."""

    def __init__(self, status: int, reason: str) -> None:
        super().__init__(reason)
        self.status, self.reason = status, reason


@dataclass(frozen=True)
class RequestHead:
    """One request head, read strictly. `headers`: (name as sent, value), in order;
    `body_length`: the Content-Length, 0 without one."""

    method: str
    target: str
    version: str
    headers: tuple[tuple[str, str], ...]
    body_length: int

    @classmethod
    def parse(cls, head: bytes) -> RequestHead:
        """Read `head` (the request line and headers, up to and with the blank line), or
        raise `MalformedRequest` naming the first thing wrong with it."""
        if not head.endswith(b"\r\n\r\n"):
            raise MalformedRequest(400, "the head does not end with CRLF CRLF")
        if _LONE_CR_OR_LF.search(head):
            raise MalformedRequest(400, "a bare LF or CR in the request head (lines end with CRLF)")
        request_line, *lines = head[:-4].split(b"\r\n")
        line = _REQUEST_LINE.fullmatch(request_line)
        if line is None:
            raise MalformedRequest(400, "malformed request line")
        headers = tuple(_field(raw) for raw in lines)
        names = [name.lower() for name, _ in headers]
        for name in _SINGLE:
            if names.count(name) > 1:
                raise MalformedRequest(400, f"more than one {name} header")
        if "transfer-encoding" in names:
            raise MalformedRequest(411, "Transfer-Encoding is not forwarded: send the body with a Content-Length")
        method, target, version = (part.decode("ascii") for part in line.groups())
        return cls(method, target, version, headers, _content_length(headers))

    def values(self, name: str) -> list[str]:
        """The values of every header called `name` (any case)."""
        return [value for header, value in self.headers if header.lower() == name]


def head_end(buffer: bytes | bytearray, searched: int = 0) -> int:
    """Where the head in `buffer` ends (just after its blank line), or -1 if not yet.

    `searched`: how much of `buffer` an earlier call already found no end in (a head
    that arrives a byte at a time is then not searched again from its start each time).
    """
    found = _HEAD_END.search(buffer, max(0, searched - 3))
    return -1 if found is None else found.end()


def _field(raw: bytes) -> tuple[str, str]:
    if raw[:1] in (b" ", b"\t"):
        raise MalformedRequest(400, "a folded header line (obs-fold)")
    field = _FIELD.fullmatch(raw)
    if field is None:
        raise MalformedRequest(400, "a malformed header line (name, colon, value)")
    name, value = field.groups()
    return name.decode("ascii"), value.decode("latin-1")


def _content_length(headers: tuple[tuple[str, str], ...]) -> int:
    for name, value in headers:
        if name.lower() == "content-length":
            if not value.isascii() or not value.isdigit() or len(value) > _MAX_CONTENT_LENGTH_DIGITS:
                raise MalformedRequest(400, "Content-Length is not a number")
            return int(value)
    return 0

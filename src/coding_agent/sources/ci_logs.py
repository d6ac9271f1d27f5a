"""The tail of a CI log, read without holding the log (SPEC 16).

A CI log may be 50 MB. Where the forge honours `Range: bytes=-N` only the tail crosses
the wire; where it ignores the header the whole log streams past and `TailBuffer`
keeps the last bytes of it, so memory stays bounded either way. `last_lines` then turns
those bytes into what the model reads: decoded with invalid UTF-8 replaced (a log is
whatever the job printed), terminal escapes removed and a carriage-return overwritten
line shown as a terminal shows it (GitLab traces colour every line and mark sections
with `section_start:...\\r`), other control characters (NUL...) dropped, a first line
cut in half dropped, the last `lines` kept.
"""

from __future__ import annotations

import re

__all__ = ["TailBuffer", "last_lines", "tail_budget"]

# Bytes of log read per wanted line: generous for long compiler and test-runner lines,
# and the budget stays far below a big log's size.
_BYTES_PER_LINE = 1024
_MAX_BUDGET = 4 * 1024 * 1024
# CSI (colours, erase line), OSC (titles, hyperlinks) and any other two-byte escape.
_ESCAPES = re.compile(r"\x1b\[[0-?]*[ -/]*[@-~]|\x1b\][^\x07\x1b]*(?:\x07|\x1b\\)?|\x1b[@-Z\\-_]")
# Control characters a terminal does not print (NUL would not even fit a database text).
_CONTROLS = re.compile(r"[\x00-\x08\x0b-\x1f\x7f]")


def tail_budget(lines: int) -> int:
    """How many bytes from the end of a log to read for its last `lines` lines."""
    return min(max(lines, 1) * _BYTES_PER_LINE, _MAX_BUDGET)


class TailBuffer:
    """The last `limit` bytes of a stream fed in chunks; `cut` tells whether any were dropped."""

    def __init__(self, limit: int) -> None:
        self._limit = limit
        self._data = bytearray()
        self.cut = False

    def feed(self, chunk: bytes) -> None:
        self._data += chunk
        excess = len(self._data) - self._limit
        if excess > 0:
            del self._data[:excess]
            self.cut = True

    @property
    def data(self) -> bytes:
        return bytes(self._data)


def _as_shown(line: str) -> str:
    """A line as a terminal leaves it: escapes gone, only what the last `\\r` left visible."""
    line = _ESCAPES.sub("", line).rstrip("\r")
    return _CONTROLS.sub("", line.rsplit("\r", 1)[-1])


def last_lines(data: bytes, lines: int, *, starts_mid_line: bool) -> str:
    """The last `lines` lines of the log tail `data`, decoded and cleaned.

    `starts_mid_line` says that `data` begins somewhere inside the log (a range or a
    cut buffer), so its first line is a fragment and is dropped when there is more.
    """
    if lines <= 0:
        return ""
    text = data.decode("utf-8", errors="replace")
    parts = text.split("\n")
    if starts_mid_line and len(parts) > 1:
        parts = parts[1:]
    if parts and parts[-1] == "":
        parts.pop()
    return "\n".join(_as_shown(line) for line in parts[-lines:])

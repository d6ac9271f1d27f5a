"""Secret redaction for everything the agent writes: logs, comments, context files.

The configured secrets are replaced exactly; well-known token shapes (GitHub, GitLab,
OpenAI keys, bearer headers) are masked as well, in case a secret reaches us from
somewhere the config does not know about (a tool's output, an error message).
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import Any

__all__ = ["Redactor", "REDACTED"]

REDACTED = "***"

_TOKEN_SHAPES = re.compile(
    r"(?:gh[pousr]_[A-Za-z0-9]{20,}|github_pat_[A-Za-z0-9_]{20,}|glpat-[A-Za-z0-9_\-]{16,}"
    r"|sk-[A-Za-z0-9_\-]{20,}|(?<=Bearer )[A-Za-z0-9._\-]{16,}|(?<=token )[A-Za-z0-9._\-]{30,})"
)
# What every match of _TOKEN_SHAPES starts with or follows: a text holding none of these
# cannot match it. Most text (code, tool output, prose) holds none, and the pattern is
# slow to scan (its look-behinds are tried at every position: about 35 ns a character,
# the markers about 7), while everything the agent writes passes through here, a tool's
# output several times per step. Keep the two in step (tests/unit/test_redaction.py).
_TOKEN_MARKERS = ("ghp_", "gho_", "ghu_", "ghs_", "ghr_", "github_pat_", "glpat-", "sk-", "Bearer ", "token ")


def _may_hold_a_token(value: str) -> bool:
    # _TOKEN_MARKERS spelt out: a generator over the tuple costs more than the scan of a
    # short text (a comment id, a label).
    return (
        "ghp_" in value or "gho_" in value or "ghu_" in value or "ghs_" in value or "ghr_" in value
        or "github_pat_" in value or "glpat-" in value or "sk-" in value or "Bearer " in value or "token " in value
    )


class Redactor:
    """Masks the given secrets (ignoring ones too short to be meaningful) and token shapes."""

    def __init__(self, secrets: Iterable[str] = ()) -> None:
        unique = {secret for secret in secrets if secret and len(secret) >= 4}
        # Longest first, so a secret that contains another is masked whole.
        self._secrets = sorted(unique, key=len, reverse=True)
        self._pattern = re.compile("|".join(re.escape(s) for s in self._secrets)) if self._secrets else None

    @property
    def secrets(self) -> list[str]:
        return list(self._secrets)

    def text(self, value: str) -> str:
        if self._pattern is not None:
            value = self._pattern.sub(REDACTED, value)
        if _may_hold_a_token(value):
            value = _TOKEN_SHAPES.sub(REDACTED, value)
        return value

    def data(self, value: Any) -> Any:
        """Redact every string inside a JSON-like structure."""
        if isinstance(value, str):
            return self.text(value)
        if isinstance(value, dict):
            return {key: self.data(item) for key, item in value.items()}
        if isinstance(value, (list, tuple)):
            return [self.data(item) for item in value]
        return value

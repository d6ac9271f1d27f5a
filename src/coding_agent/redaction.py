"""Secret redaction for everything the agent writes: logs, comments, context files.

The configured secrets are replaced exactly; well-known token shapes (GitHub, GitLab,
OpenAI keys, bearer headers) are masked as well, in case a secret reaches us from
somewhere the config does not know about (a tool's output, an error message).
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping
from typing import Any
from urllib.parse import unquote, urlsplit

__all__ = ["Redactor", "REDACTED", "proxy_passwords"]

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


def proxy_passwords(environ: Mapping[str, str]) -> list[str]:
    """The passwords in the proxy variables of `environ` (`http://user:password@proxy:3128`),
    as written and decoded: git and the HTTP clients are given these URLs, and an error
    that quotes one must not show its password. A proxy variable is any `*_proxy` but
    `no_proxy`, in either case, as for urllib's `getproxies_environment`."""
    found: list[str] = []
    for name, value in environ.items():
        if not name.lower().endswith("_proxy") or name.lower() == "no_proxy":
            continue
        try:
            password = urlsplit(value if "://" in value else f"http://{value}").password
        except ValueError:  # not a URL (a broken IPv6 address, say): no client can use it either
            continue
        if password:
            found += [password, unquote(password)]
    return found


class Redactor:
    """Masks the given secrets (ignoring ones too short to be meaningful) and token shapes."""

    def __init__(self, secrets: Iterable[str] = ()) -> None:
        unique = {secret for secret in secrets if secret and len(secret) >= 4}
        # Longest first, so a secret that contains another is masked whole.
        self._secrets = sorted(unique, key=len, reverse=True)
        self._pattern = re.compile("|".join(re.escape(s) for s in self._secrets)) if self._secrets else None
        # JSON text shows a string's characters as they are, except these (escaped): a
        # secret holding one of them may be in a string and not in the text.
        self._json_checkable = not any(c in '"\\' or ord(c) < 0x20 for secret in self._secrets for c in secret)

    @property
    def secrets(self) -> list[str]:
        return list(self._secrets)

    def text(self, value: str) -> str:
        if self._pattern is not None:
            value = self._pattern.sub(REDACTED, value)
        if _may_hold_a_token(value):
            value = _TOKEN_SHAPES.sub(REDACTED, value)
        return value

    def json(self, value: Any, indent: int | None = None) -> str:
        """`json.dumps(self.data(value), ensure_ascii=False, indent=indent, default=str)`,
        the form of every JSON file the agent writes, mostly without walking `value`.

        `value` is encoded as it is, and the text searched for a secret or a token marker:
        a string that redaction would change holds one, and holds it unchanged in the
        text (no secret has a character JSON escapes, nor has a marker), so a text
        without any is exactly what the redacted value encodes to. Otherwise (a rare
        text, or a secret JSON would escape) the value is redacted first, as always."""
        text = json.dumps(value, ensure_ascii=False, indent=indent, default=str)
        if self._json_checkable and not (self._pattern is not None and self._pattern.search(text)):
            if not _may_hold_a_token(text):
                return text
        return json.dumps(self.data(value), ensure_ascii=False, indent=indent, default=str)

    def data(self, value: Any) -> Any:
        """Redact every string inside a JSON-like structure."""
        if isinstance(value, str):
            return self.text(value)
        if isinstance(value, dict):
            return {key: self.data(item) for key, item in value.items()}
        if isinstance(value, (list, tuple)):
            return [self.data(item) for item in value]
        return value

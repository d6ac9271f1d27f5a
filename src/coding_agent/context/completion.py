"""Completion comments (SPEC 9.1): "thanks, done!" ends a conversation instead of starting a run.

The seed matched keywords as substrings, so "token" looked like "ok" and "未完了" (not
finished) like "完了" (finished). Here a keyword counts only as a whole word or phrase,
and not when it is negated ("not done", "完了していません") or when the comment still
asks for something (a question, "please", "ください"): ending a conversation by mistake
silently drops a request, which is worse than one extra run.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from functools import lru_cache

__all__ = ["CompletionDetector", "is_completion_comment"]

# English negations that may stand up to two words before the keyword ("not quite done").
_NEGATION_BEFORE = re.compile(
    r"(?:\b(?:not|never|no|isn'?t|aren'?t|wasn'?t|hasn'?t|haven'?t|don'?t|doesn'?t|didn'?t)|n't)"
    r"(?:\s+[\w'-]+){0,2}\s*$",
    re.IGNORECASE,
)
# Japanese: a negating prefix glued to the keyword (未完了, 不完全) ...
_JA_NEGATING_PREFIX = frozenset("未不非無")
# ... or a negating ending right after it (完了していません, 完了じゃない).
_JA_NEGATION_AFTER = re.compile(r"^\s*(?:では|じゃ|して|され|でき|し)?(?:てい|い|て)?(?:ない|ません|ず)")
# A comment that still asks for something is not the end of the conversation.
_REQUEST = re.compile(
    r"[?？]|\b(?:please|could you|can you|would you|also|but)\b|ください|お願い|してほしい|して欲しい|でも|ただ",
    re.IGNORECASE,
)


@lru_cache(maxsize=256)
def _keyword_pattern(keyword: str) -> re.Pattern[str]:
    """Whole word/phrase for alphabetic keywords; plain text for CJK (no word boundaries)."""
    escaped = r"\s+".join(re.escape(part) for part in keyword.split())
    if keyword[:1].isascii() and keyword[-1:].isascii():
        return re.compile(rf"(?<![\w]){escaped}(?![\w])", re.IGNORECASE)
    return re.compile(escaped, re.IGNORECASE)


def _negated(text: str, start: int, end: int, keyword: str) -> bool:
    if keyword[:1].isascii():
        return bool(_NEGATION_BEFORE.search(text[:start]))
    before = text[start - 1] if start > 0 else ""
    return before in _JA_NEGATING_PREFIX or bool(_JA_NEGATION_AFTER.match(text[end:]))


class CompletionDetector:
    """Decides whether a comment's text is a completion comment, for one keyword list."""

    def __init__(self, keywords: Iterable[str]) -> None:
        self.keywords = tuple(keyword.strip() for keyword in keywords if keyword.strip())

    def __call__(self, text: str) -> bool:
        text = text.strip()
        if not text or _REQUEST.search(text):
            return False
        for keyword in self.keywords:
            for match in _keyword_pattern(keyword).finditer(text):
                if not _negated(text, match.start(), match.end(), keyword):
                    return True
        return False


def is_completion_comment(text: str, keywords: Iterable[str]) -> bool:
    """Convenience form of `CompletionDetector(keywords)(text)`."""
    return CompletionDetector(keywords)(text)

"""Completion comments (SPEC 9.1): whole words or phrases, not negated, not a request."""

from __future__ import annotations

import pytest

from coding_agent.config import DEFAULT_COMPLETION_KEYWORDS
from coding_agent.context.completion import CompletionDetector, is_completion_comment

detect = CompletionDetector(DEFAULT_COMPLETION_KEYWORDS)


@pytest.mark.parametrize(
    "text",
    ["Thanks, done!", "ありがとうございました", "Done", "LGTM", "@agent-bot thank you", "完了しました", "This is done."],
)
def test_completion_comments(text: str) -> None:
    assert detect(text)


@pytest.mark.parametrize(
    "text",
    [
        "not done",
        "token",
        "未完了",
        "incomplete",
        "It's not quite done",
        "Not done yet",
        "完了していません",
        "undone",
        "Thanks! Could you also add tests?",
        "ありがとう、でもテストも追加してください",
        "",
    ],
)
def test_not_completion_comments(text: str) -> None:
    assert not detect(text)


def test_keywords_come_from_the_configuration() -> None:
    assert is_completion_comment("ship it", ["ship it"])
    assert not is_completion_comment("Thanks, done!", ["ship it"])

"""`neutralise_quick_actions`: no line of a GitLab text starts with a quick action, the words stay."""

from __future__ import annotations

import re

import pytest
from hypothesis import given
from hypothesis import strategies as st

from coding_agent.domain.inert import JOINER
from coding_agent.sources.gitlab.quick_actions import neutralise_quick_actions, restore_quick_actions
from coding_agent.sources.writes import has_marker, marked, strip_marker

# A `/word` at a line's start, after blanks or `>` marks, after any line break: stricter than GitLab.
COMMAND_LINE = re.compile(r"(?:\A|(?<=[\n\r\v\f\x1c\x1d\x1e\x85\u2028\u2029]))[^\S\n\r]*(?:>[^\S\n\r]*)*/\w")


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("/merge", f"/{JOINER}merge"),
        ("Done.\n/approve\n/label ~x", f"Done.\n/{JOINER}approve\n/{JOINER}label ~x"),
        ("  /assign @eve", f"  /{JOINER}assign @eve"),
        ("\t/close", f"\t/{JOINER}close"),
        ("> /merge", f"> /{JOINER}merge"),
        (">> >/unassign @bot", f">> >/{JOINER}unassign @bot"),
        ("a\r/merge\r\n/MERGE", f"a\r/{JOINER}merge\r\n/{JOINER}MERGE"),
        ("x\u2028/merge", f"x\u2028/{JOINER}merge"),
        ("/futureaction now", f"/{JOINER}futureaction now"),
    ],
)
def test_every_line_leading_command_is_neutralised(text: str, expected: str) -> None:
    assert neutralise_quick_actions(text) == expected
    assert restore_quick_actions(expected) == text


@pytest.mark.parametrize(
    "text",
    ["Run `/merge` when ready.", "- /merge", "a / b", "/ merge", "//comment", "path a/b/c", "", "no slash at all"],
)
def test_text_without_a_line_leading_command_is_left_alone(text: str) -> None:
    assert neutralise_quick_actions(text) == text


def test_neutralising_twice_changes_nothing_more() -> None:
    once = neutralise_quick_actions("/merge\n> /approve")
    assert neutralise_quick_actions(once) == once


def test_the_hidden_marker_survives() -> None:
    body = marked(neutralise_quick_actions("/merge"), "0" * 32)
    assert has_marker(body, "0" * 32) and strip_marker(body) == f"/{JOINER}merge"


TEXT = st.text(alphabet=st.sampled_from(["/", ">", " ", "\t", "\n", "\r", "\u2028", "a", "Z", "_", "1", "@", "~", "`"]), max_size=40)


@given(TEXT)
def test_no_line_starts_a_command_and_the_words_come_back(text: str) -> None:
    neutral = neutralise_quick_actions(text)
    assert COMMAND_LINE.search(neutral) is None, repr(neutral)
    assert neutral.replace(JOINER, "") == text, "only joiners are added"
    assert restore_quick_actions(neutral) == text

"""The small rules behind what the dashboard shows: a reason in one line, coarse
durations, filters that name a bad value, and links that can only be web links."""

from __future__ import annotations

from pathlib import Path

import pytest

from coding_agent.web.pages import duration
from coding_agent.web.views import TaskFilter, UnknownFilter, one_line

from tests.support.state import agent_store


def test_a_reason_is_the_first_line_that_says_something() -> None:
    notice = "## ⛔ Task stopped\n\nAn operator stopped the coding agent (`coding-agent stop`).\n\n**Stopped at:** now"
    assert one_line(notice) == "An operator stopped the coding agent (coding-agent stop)."
    assert one_line("x" * 500).endswith("…") and len(one_line("x" * 500)) == 200
    assert one_line("\n\n") == ""


@pytest.mark.parametrize(
    ("seconds", "text"),
    [(None, ""), (5, "<1 min"), (61, "1 min"), (3600, "1 h"), (3725, "1 h 2 min"), (90000, "1 d 1 h")],
)
def test_durations_change_at_most_once_a_minute(seconds: float | None, text: str) -> None:
    assert duration(seconds) == text


def test_an_unknown_state_filter_names_the_states() -> None:
    assert TaskFilter.of({"state": "failed", "repository": "acme/widgets"}) == TaskFilter("failed", "acme/widgets", None)
    with pytest.raises(UnknownFilter, match="unknown state '<b>': one of waiting, running"):
        TaskFilter.of({"state": "<b>"})


def test_only_web_links_are_kept_and_titles_are_capped(tmp_path: Path) -> None:
    with agent_store(tmp_path) as store:
        store.tasks.note_task("github:acme/widgets#1", "ü" * 900, "javascript:alert(1)")
        store.tasks.note_change("github:acme/widgets#1", "data:text/html,<b>x</b>")
        store.tasks.note_task("github:acme/widgets#2", "Fine", "https://github.example/acme/widgets/issues/2")
        store.tasks.note_change("github:acme/widgets#2", "https://github.example/acme/widgets/pull/3")
        facts = store.tasks.task_facts()
    assert facts["github:acme/widgets#1"].url is None and facts["github:acme/widgets#1"].change_url is None
    assert facts["github:acme/widgets#1"].title == "ü" * 500
    assert facts["github:acme/widgets#2"].change_url == "https://github.example/acme/widgets/pull/3"

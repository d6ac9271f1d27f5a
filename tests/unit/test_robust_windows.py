"""Window arithmetic over every length and limit (issue 11 item 11): `max_comment_count`,
`channel_messages_limit` and `keep_recent_messages` keep exactly the newest N."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

from hypothesis import given
from hypothesis import strategies as st

from coding_agent.context.channel_context import build_channel_messages
from coding_agent.context.conversation import build_conversation
from coding_agent.context.windows import compression_cut, newest
from coding_agent.domain.tasks import Comment, Task, TaskKey
from coding_agent.prompts.untrusted import UntrustedWrapper

T0 = datetime(2026, 3, 1, 9, 0, tzinfo=timezone.utc)
TASK = Task(
    key=TaskKey.parse("github:acme/widgets#1"),
    title="Windowed",
    body="Body.",
    author="alice",
    labels=(),
    assignees=(),
    created_at=T0,
    updated_at=T0,
    url="https://example.invalid/1",
)
COUNTS = st.integers(min_value=0, max_value=40)
LIMITS = st.integers(min_value=0, max_value=50)


def _comments(n: int) -> list[Comment]:
    return [Comment(str(i), "alice", f"comment {i}", T0 + timedelta(minutes=i)) for i in range(n)]


@given(COUNTS, LIMITS)
def test_newest_keeps_the_last_min_n_limit(n: int, limit: int) -> None:
    assert newest(list(range(n)), limit) == list(range(n - min(n, limit), n))


@given(COUNTS, LIMITS)
def test_max_comment_count_keeps_the_newest(n: int, limit: int) -> None:
    context = build_conversation(
        TASK,
        list(reversed(_comments(n))),  # any order in, chronological out
        bot_name="agent-bot",
        is_trusted=lambda author: True,
        max_comment_count=limit,
        is_completion=lambda text: False,
        wrapper=UntrustedWrapper("0" * 16),
    )
    kept = [turn.content for turn in context.conversation[1:]]
    assert kept == [f"comment {i}" for i in range(n - min(n, limit), n)]
    assert context.context_summary.truncated is (n > limit)
    assert context.context_summary.total_comments == n


@given(COUNTS, st.integers(min_value=1, max_value=50))
def test_channel_messages_limit_keeps_the_newest(n: int, limit: int) -> None:
    history = build_channel_messages("github:acme/widgets", "acme/widgets", _comments(n), [], limit)
    assert [m.body for m in history.top_level_messages] == [f"comment {i}" for i in range(n - min(n, limit), n)]


@given(st.lists(st.booleans(), max_size=30), st.integers(min_value=0, max_value=5), st.integers(min_value=0, max_value=40))
def test_compression_keeps_the_newest_and_never_splits_a_tool_answer(tool_flags: list[bool], head: int, keep: int) -> None:
    length = len(tool_flags)
    head = min(head, length)
    cut = compression_cut(length, head, keep, lambda index: tool_flags[index])
    assert head <= cut <= length
    assert length - cut >= min(keep, length - head), "at least the newest keep_recent messages stay"
    assert cut == head or cut == length or not tool_flags[cut], "the kept part never starts with a tool answer"
    if cut > head and cut < length:
        assert cut <= max(length - keep, head), "only tool answers move the cut back"

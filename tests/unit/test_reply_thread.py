"""Which thread a PR/MR run answers in: the newest trusted request decides."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

from coding_agent.agent.reporter import request_thread
from coding_agent.domain.tasks import Comment, Task, TaskKey, Thread

T0 = datetime(2025, 1, 1, tzinfo=timezone.utc)
TRUSTED = {"alice", "agent-bot"}


def _task(key: str) -> Task:
    return Task(TaskKey.parse(key), "t", "", "alice", (), (), "", T0, T0)


def _comment(author: str, minutes: int, thread: str | None = None) -> Comment:
    return Comment(f"{author}-{minutes}", author, "please", T0 + timedelta(minutes=minutes), thread)


def _thread(thread_id: str, *comments: Comment) -> Thread:
    return Thread(thread_id, comments)


def _answer(task: Task, comments: list[Comment], threads: list[Thread]) -> str | None:
    return request_thread(task, comments, threads, lambda author: author in TRUSTED, "agent-bot")


def test_newest_trusted_thread_comment_is_answered_in_its_thread() -> None:
    change = _task("github:acme/app!3")
    thread = _thread("77", _comment("alice", 1, "77"), _comment("alice", 9, "77"))
    assert _answer(change, [_comment("alice", 5)], [thread]) == "77"


def test_a_newer_top_level_request_is_answered_at_the_top_level() -> None:
    change = _task("gitlab:acme/app!3")
    thread = _thread("abc", _comment("alice", 1, "abc"))
    assert _answer(change, [_comment("alice", 5)], [thread]) is None


def test_untrusted_and_bot_comments_never_choose_the_thread() -> None:
    change = _task("github:acme/app!3")
    thread = _thread("77", _comment("mallory", 9, "77"), _comment("agent-bot", 10, "77"))
    assert _answer(change, [_comment("alice", 5)], [thread]) is None
    assert _answer(change, [], [thread]) is None


def test_issues_have_no_threads() -> None:
    issue = _task("github:acme/app#3")
    assert _answer(issue, [], [_thread("77", _comment("alice", 9, "77"))]) is None

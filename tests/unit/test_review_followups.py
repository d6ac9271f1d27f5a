"""Which PR/MR is the agent's own for an issue (review-thread follow-ups, SPEC 3), and the
thread reference a run keeps in its metadata."""

from __future__ import annotations

from datetime import datetime, timezone

import pytest

from coding_agent.domain.tasks import Comment, Task, TaskKey, Thread, ThreadRef
from coding_agent.runtime.followups import agents_issue, thread_triggers

T0 = datetime(2026, 3, 1, tzinfo=timezone.utc)


def change(author: str = "agent-bot", head: str = "coding-agent/12-greet-people", **extra: str) -> Task:
    key = TaskKey.parse("github:acme/widgets!40")
    return Task(key, "Greet", "", author, (), (), "", T0, T0, head_branch=head, extra=dict(extra))


def test_the_bots_pull_on_a_task_branch_belongs_to_its_issue() -> None:
    assert agents_issue(change(), "agent-bot") == TaskKey.parse("github:acme/widgets#12")
    assert agents_issue(change(author="Agent-Bot"), "agent-bot") is not None, "logins compare without case"


@pytest.mark.parametrize(
    "task",
    [
        change(author="alice"),  # someone else's PR on a branch of that name
        change(head="feature"),  # not a task branch
        change(head="coding-agent/x-greet"),
        change(head_repo="mallory/widgets"),  # a fork's branch
    ],
)
def test_other_pulls_are_not_the_agents(task: Task) -> None:
    assert agents_issue(task, "agent-bot") is None


def test_each_threads_trigger_is_its_newest_mention_after_the_bots_last_word() -> None:
    def at(minute: int, author: str, body: str, thread: str) -> Comment:
        return Comment(f"{thread}-{minute}", author, body, T0.replace(minute=minute), thread)

    answered = Thread("a", (at(1, "alice", "@agent-bot go", "a"), at(2, "agent-bot", "Done.", "a")))
    asked = Thread("b", (at(3, "alice", "hm", "b"), at(4, "bob", "@agent-bot more", "b")))
    earlier = Thread("c", (at(0, "carol", "@agent-bot first", "c"),))
    assert [(t.id, c.id) for t, c in thread_triggers([answered, asked, earlier], "agent-bot")] == [("c", "c-0"), ("b", "b-4")]


def test_a_thread_reference_survives_its_string_form() -> None:
    ref = ThreadRef(TaskKey.parse("gitlab:acme/widgets!7"), "6a9c1750b37d513a43987b574953fceb50b03ce7")
    assert ThreadRef.parse(str(ref)) == ref
    with pytest.raises(ValueError, match="not a thread reference"):
        ThreadRef.parse("gitlab:acme/widgets!7")

"""Which review thread a PR/MR run answers in, if any (SPEC 7).

The rule: on a PR/MR task, look at every comment by a trusted person (write access,
not the bot itself), top-level and inside review threads / MR discussions. The newest
of them is the request this run answers. If it sits in a thread, the run was started
from that thread, and the final reply goes there; otherwise it goes to the PR/MR's
top-level comments, as for issues. Issues have no threads.

Comments of people without write access never decide where the agent speaks: they
cannot start a run either.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

from coding_agent.domain.tasks import Comment, Task, Thread

__all__ = ["request_thread"]


def request_thread(
    task: Task,
    comments: Iterable[Comment],
    threads: Iterable[Thread],
    is_trusted: Callable[[str], bool],
    bot_name: str | None,
) -> str | None:
    """The id of the thread holding the newest trusted request, or None for a top-level one."""
    if not task.key.is_change:
        return None
    bot = (bot_name or "").lower()

    def asks(comment: Comment) -> bool:
        return comment.author.lower() != bot and is_trusted(comment.author)

    candidates = [(c.created_at, 0, None) for c in comments if asks(c)]
    candidates += [(c.created_at, 1, thread.id) for thread in threads for c in thread.comments if asks(c)]
    if not candidates:
        return None
    # On equal timestamps a thread comment wins: it is the more specific request.
    _, _, thread_id = max(candidates, key=lambda item: (item[0], item[1]))
    return thread_id

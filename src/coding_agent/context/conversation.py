"""The conversation context of seed 001 (SPEC 9.1): the task and its comments as turns.

`issue {number, title, description, labels, created_at, updated_at}`,
`conversation [{role, content, metadata {author, created_at, id, is_completion}}]`,
`context_summary {total_comments, truncated, oldest_included}`.

Two departures from the seed, both on purpose (SPEC 14): the bot's own comments are the
`assistant` turns and everyone else's are `user` turns; completion keywords match whole
words. Text from authors without write access is wrapped as untrusted here, once, so
whatever renders the structure cannot forget to.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from coding_agent.context.windows import newest
from coding_agent.domain.conversation import ContextSummary, ConversationContext, IssueInfo, Turn, TurnMetadata
from coding_agent.domain.tasks import Comment, Task
from coding_agent.prompts.untrusted import UntrustedWrapper

__all__ = [
    "IssueInfo",
    "TurnMetadata",
    "Turn",
    "ContextSummary",
    "ConversationContext",
    "build_conversation",
    "is_bot",
]

def is_bot(author: str, bot_name: str | None) -> bool:
    return bool(bot_name) and author.lower() == str(bot_name).lower()


def build_conversation(
    task: Task,
    comments: Sequence[Comment],
    *,
    bot_name: str | None,
    is_trusted: Callable[[str], bool],
    max_comment_count: int,
    is_completion: Callable[[str], bool],
    wrapper: UntrustedWrapper,
) -> ConversationContext:
    """The task's description as the first user turn, then its newest `max_comment_count` comments.

    An untrusted author's title and description are wrapped like their comments: the
    structure holds only text that is safe to render as it is.
    """

    def content(author: str, text: str) -> str:
        text = text.strip() or "(empty)"
        return text if is_trusted(author) else wrapper.wrap(author, text)

    ordered = sorted(comments, key=lambda c: c.created_at)
    kept = newest(ordered, max_comment_count)
    opening = Turn(
        role="user",
        content=content(task.author, task.body),
        metadata=TurnMetadata(task.author, task.created_at.isoformat(), str(task.key), False),
    )
    turns = [opening]
    for comment in kept:
        from_bot = is_bot(comment.author, bot_name)
        completion = not from_bot and is_trusted(comment.author) and is_completion(comment.body)
        turns.append(
            Turn(
                role="assistant" if from_bot else "user",
                content=(comment.body.strip() or "(empty)") if from_bot else content(comment.author, comment.body),
                metadata=TurnMetadata(comment.author, comment.created_at.isoformat(), comment.id, completion),
            )
        )
    issue = IssueInfo(
        number=task.key.number,
        title=task.title if is_trusted(task.author) else wrapper.wrap(task.author, task.title),
        description=opening.content,
        labels=tuple(task.labels),
        created_at=task.created_at.isoformat(),
        updated_at=task.updated_at.isoformat(),
    )
    summary = ContextSummary(
        total_comments=len(ordered),
        truncated=len(kept) < len(ordered),
        oldest_included=kept[0].created_at.isoformat() if kept else None,
    )
    return ConversationContext(issue, tuple(turns), summary)

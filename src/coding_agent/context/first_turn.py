"""The first user turn of a run, assembled from the SPEC 9 structures.

One function, used by the runner (with memories and the configured limits) and by
`render_task_prompt` (everything, no memories), so that there is one way the
task, its conversation, its review threads and the memories become prompt text.
`compose_first_turn` also says which comments the conversation shows, as data: the run
records them (`RunContextFiles.record_comments`) for the task page.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

from coding_agent.context.channel_context import build_channel_messages
from coding_agent.context.completion import CompletionDetector
from coding_agent.context.conversation import build_conversation, is_bot
from coding_agent.context.storage import CommentRead
from coding_agent.domain.channel import Recollection
from coding_agent.domain.memories import channel_of
from coding_agent.domain.tasks import Comment, Task, Thread
from coding_agent.prompts.context_prompts import render_task_context
from coding_agent.prompts.untrusted import UntrustedWrapper

__all__ = ["FirstTurn", "FirstTurnSettings", "compose_first_turn", "render_task_prompt"]


@dataclass(frozen=True)
class FirstTurnSettings:
    """Limits and identity; None limits mean "everything". `wrapper`: the run's wrapper
    for untrusted text (its nonce is named in the run's system prompt)."""

    bot_name: str | None = None
    max_comment_count: int | None = None
    completion_keywords: tuple[str, ...] = ()
    channel_messages_limit: int | None = None
    persona: str | None = None
    wrapper: UntrustedWrapper = field(default_factory=UntrustedWrapper.new)


@dataclass(frozen=True)
class FirstTurn:
    """The first user turn's text, and the comments its conversation shows (oldest
    first, as the forge gave them; the bot's own marked `own`)."""

    text: str
    comments: tuple[CommentRead, ...]


def compose_first_turn(
    task: Task,
    comments: Sequence[Comment],
    threads: Sequence[Thread],
    is_trusted: Callable[[str], bool],
    settings: FirstTurnSettings = FirstTurnSettings(),
    memories: Recollection | None = None,
    followup: bool = False,
    branch_rules: Mapping[str, str] | None = None,
) -> FirstTurn:
    """The first user turn, and the comments it shows.

    `memories`: what the memory keeper recalled for the task (None: memories are off).
    `branch_rules`: rule files read from a PR head the task's trigger does not control
    (path -> text). They are not rules: they are shown here, wrapped as written by the
    task's author, as untrusted context.
    """
    wrapper = settings.wrapper
    conversation = build_conversation(
        task,
        comments,
        bot_name=settings.bot_name,
        is_trusted=is_trusted,
        max_comment_count=len(comments) if settings.max_comment_count is None else settings.max_comment_count,
        is_completion=CompletionDetector(settings.completion_keywords),
        wrapper=wrapper,
    )
    top_level = [wrapper.comment(c, is_trusted) for c in comments]
    wrapped = [Thread(t.id, tuple(wrapper.comment(c, is_trusted) for c in t.comments), t.path, t.line) for t in threads]
    limit = settings.channel_messages_limit
    if limit is None:
        limit = len(comments) + sum(len(t.comments) for t in threads)
    channel_id, channel_name = channel_of(task.key)
    # Rendered from it: the review threads (the top-level stream is the conversation above).
    history = build_channel_messages(channel_id, channel_name, top_level, wrapped, limit)
    context = (memories or Recollection(str(task.key))).context(settings.persona, history)
    untrusted_files = {path: wrapper.wrap(task.author, text) for path, text in (branch_rules or {}).items()}
    text = render_task_context(
        task, conversation, context, {t.id: t for t in threads}, followup=followup, branch_files=untrusted_files
    )
    by_id = {str(comment.id): comment for comment in comments}
    shown = [by_id[turn.metadata.id] for turn in conversation.conversation[1:] if turn.metadata.id in by_id]
    return FirstTurn(text, tuple(CommentRead.of(c, own=is_bot(c.author, settings.bot_name)) for c in shown))


def render_task_prompt(
    task: Task,
    comments: list[Comment],
    threads: list[Thread],
    is_trusted: Callable[[str], bool],
) -> str:
    """The first user turn with every comment and thread, and no memories (tests, a dry run)."""
    return compose_first_turn(task, comments, threads, is_trusted).text

"""Renders the context structures of SPEC 9 into prompt text (templates in `templates/`).

- `render_context`: a seed-004 `Context` (persona, memories, review threads);
- `render_task_context`: the first user turn — the task, the rendered `Context`, and the
  seed-001 conversation with its truncation said out loud;
- `render_memory_request` / `render_summary_request`: the two extra requests of a run
  (memories after it, compression during it).

Public and pure, so tests and a dry run see exactly what the model is sent. The first
user turn is one message rather than one chat turn per comment: the JSON-text protocol
stays the only thing the model sees itself answer in, chat templates that insist on
alternating roles keep working, and the prompt prefix stays stable for caching.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from coding_agent.domain.channel import ChannelMemory, Context
from coding_agent.domain.chat import Message
from coding_agent.domain.conversation import ConversationContext
from coding_agent.domain.tasks import Comment, Task, TaskKey, Thread
from coding_agent.prompts.prompting import task_kind_words, template, text

__all__ = [
    "render_context",
    "render_task_context",
    "render_memory_request",
    "render_summary_request",
    "SUMMARY_SYSTEM_PROMPT",
    "SUMMARY_HEADING",
]

SUMMARY_SYSTEM_PROMPT = text("context_summary_system.j2")
# The first line of the message that replaces compressed messages in the history.
SUMMARY_HEADING = text("context_summary_heading.j2")
# Per message, in a summary request: long tool output is cut (the summary keeps facts, not logs).
_MAX_MESSAGE_CHARS = 4000
_BLANK_LINES = re.compile(r"\n{3,}")


def _tidy(text: str) -> str:
    """Templates stay readable with blank lines around blocks; the prompt gets at most one."""
    return _BLANK_LINES.sub("\n\n", text).strip()


@dataclass(frozen=True)
class _ThreadView:
    id: str
    path: str | None
    line: int | None
    messages: tuple[Comment, ...]


def _workspace_name(target: str | None) -> str:
    if target:
        try:
            key = TaskKey.parse(target)
        except ValueError:
            return target
        return key.project.rsplit("/", 1)[0]
    return ""


def render_context(context: Context, locations: Mapping[str, Thread] | None = None) -> str:
    """Persona, memories and review threads of `context`; "" when it holds none of them.

    `locations` (the task's threads by id) adds the file and line a review thread is on.
    """
    history = context.conversation_history
    channel: ChannelMemory | None = context.channel_memories.get(history.channel_id)
    if channel is not None and not (channel.long_term_memory or channel.short_term_memory):
        channel = None
    parents = {m.thread_id: m for m in history.top_level_messages if m.thread_id is not None}
    threads = []
    for thread_id in history.thread_messages:
        messages = history.get_thread(thread_id)
        parent = parents.get(thread_id)
        if parent is not None and all(m.id != parent.id for m in messages):
            messages = [parent, *messages]  # the thread's start, kept although it fell out of the window
        where = (locations or {}).get(thread_id)
        threads.append(
            _ThreadView(thread_id, where.path if where else None, where.line if where else None, tuple(messages))
        )
    thread_items = [
        {"thread": thread, "summary": summary, "is_target": thread == context.target_thread}
        for thread, summary in context.thread_memories.items()
    ]
    text = template("context.j2").render(
        persona=context.persona,
        workspace_name=_workspace_name(context.target_thread),
        workspace_long=context.workspace_long_term_memory,
        workspace_short=context.workspace_short_term_memory,
        channel=channel,
        thread_items=thread_items,
        threads=threads,
    )
    return _tidy(text)


def render_task_context(
    task: Task,
    conversation: ConversationContext,
    context: Context | None = None,
    locations: Mapping[str, Thread] | None = None,
    followup: bool = False,
    branch_files: Mapping[str, str] | None = None,
) -> str:
    """The first user turn of a run (`followup`: the run answers a new comment on a finished task).

    `branch_files`: rule files of a PR head the trigger does not control, already wrapped
    as untrusted (path -> block); shown as context, never as rules.
    """
    title, noun = task_kind_words(task)
    opening, *turns = conversation.conversation
    text = template("task_context.j2").render(
        task=task,
        kind_title=title,
        kind_noun=noun,
        issue=conversation.issue,
        opening=opening,
        turns=turns,
        summary=conversation.context_summary,
        context_text=render_context(context, locations) if context is not None else "",
        followup=followup,
        branch_files=dict(branch_files or {}),
    )
    return _tidy(text) + "\n"


def render_memory_request(repository: str, long_term: str | None, short_term: str | None) -> str:
    return _tidy(
        template("context_memory_request.j2").render(repository=repository, long_term=long_term, short_term=short_term)
    )


def _message_text(message: Message) -> str:
    parts: list[str] = []
    content = message.get("content")
    if isinstance(content, str) and content.strip():
        parts.append(content.strip())
    for call in message.get("tool_calls") or []:
        function: dict[str, Any] = call.get("function") or {}
        arguments = function.get("arguments")
        if not isinstance(arguments, str):
            arguments = json.dumps(arguments, ensure_ascii=False)
        parts.append(f"[calls {function.get('name')} with {arguments}]")
    text = "\n".join(parts) or "(empty)"
    if len(text) > _MAX_MESSAGE_CHARS:
        text = text[:_MAX_MESSAGE_CHARS] + f"\n[... {len(text) - _MAX_MESSAGE_CHARS} characters cut ...]"
    return text


def render_summary_request(messages: Sequence[Message]) -> str:
    """The request that summarises `messages` (the part of the history being compressed)."""
    views = [{"role": m.get("role", "?"), "name": m.get("name"), "text": _message_text(m)} for m in messages]
    return _tidy(template("context_summary_request.j2").render(messages=views))

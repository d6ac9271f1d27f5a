"""The long-lived context of seed 004, mapped onto forges (SPEC 9.2).

workspace = the organisation / group, channel = a repository / project, thread = one
discussion thread (a PR review thread, an MR discussion), message = a comment. The
task's top-level comments are the channel's top-level stream.

Everything here is immutable and checked on construction: a `Context` that exists is a
consistent one, so the prompt module that renders it never has to guard against a
memory filed under the wrong channel or a message filed under the wrong thread. Lists
and maps are stored as tuples and read-only mappings, so "frozen" holds all the way down.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from types import MappingProxyType

from coding_agent.domain.tasks import Comment

__all__ = ["ChannelMemory", "ChannelMessages", "Context", "Message", "Recollection"]

# A channel message is a forge comment: `created_at` is its timestamp, `thread_id` the
# thread it belongs to (None for the top-level stream).
Message = Comment


def _require_text(value: object, name: str) -> None:
    if not isinstance(value, str) or not value.strip():
        raise ValueError(f"{name} must be a non-empty string, got {value!r}")


def _optional_text(value: object, name: str) -> None:
    if value is not None and not isinstance(value, str):
        raise TypeError(f"{name} must be a string or None, got {type(value).__name__}")


def _messages(values: Sequence[Message], name: str) -> tuple[Message, ...]:
    items = tuple(values)
    for item in items:
        if not isinstance(item, Comment):
            raise TypeError(f"{name} must hold Comment messages, got {type(item).__name__}")
    return items


@dataclass(frozen=True)
class ChannelMemory:
    """What the agent remembers of one repository/project.

    `long_term_memory`: durable facts (how to build and test, conventions, pitfalls);
    `short_term_memory`: what happened recently.
    """

    channel_id: str
    channel_name: str
    long_term_memory: str | None = None
    short_term_memory: str | None = None

    def __post_init__(self) -> None:
        _require_text(self.channel_id, "channel_id")
        _require_text(self.channel_name, "channel_name")
        _optional_text(self.long_term_memory, "long_term_memory")
        _optional_text(self.short_term_memory, "short_term_memory")


@dataclass(frozen=True)
class ChannelMessages:
    """The messages of one channel: the top-level stream (thread parents included) and threads."""

    channel_id: str
    channel_name: str
    top_level_messages: Sequence[Message] = field(default_factory=tuple)
    thread_messages: Mapping[str, Sequence[Message]] = field(default_factory=dict)

    def __post_init__(self) -> None:
        _require_text(self.channel_id, "channel_id")
        _require_text(self.channel_name, "channel_name")
        top = _messages(self.top_level_messages, "top_level_messages")
        threads: dict[str, tuple[Message, ...]] = {}
        for thread_id, members in dict(self.thread_messages).items():
            _require_text(thread_id, "a thread id")
            items = _messages(members, f"thread_messages[{thread_id!r}]")
            stray = [m.id for m in items if m.thread_id != thread_id]
            if stray:
                raise ValueError(f"thread_messages[{thread_id!r}] holds messages of another thread: {stray}")
            threads[thread_id] = items
        for message in top:
            if message.thread_id is not None and message.thread_id not in threads:
                raise ValueError(
                    f"top-level message {message.id} belongs to thread {message.thread_id!r}, which is not in thread_messages"
                )
        object.__setattr__(self, "top_level_messages", top)
        object.__setattr__(self, "thread_messages", MappingProxyType(threads))

    def get_all_messages(self) -> list[Message]:
        """Every message once, oldest first (a thread parent shown at the top level counts once)."""
        unique: dict[tuple[str | None, str], Message] = {}
        for message in (*self.top_level_messages, *(m for ms in self.thread_messages.values() for m in ms)):
            unique.setdefault((message.thread_id, message.id), message)
        return sorted(unique.values(), key=lambda m: m.created_at)

    def get_thread(self, thread_id: str) -> list[Message]:
        """The thread's messages, oldest first; [] for an unknown thread."""
        return list(self.thread_messages.get(thread_id, ()))

    @property
    def thread_count(self) -> int:
        return len(self.thread_messages)

    @property
    def total_message_count(self) -> int:
        """Top-level plus thread messages, as stored (a parent shown in both counts twice, as in seed 004)."""
        return len(self.top_level_messages) + sum(len(members) for members in self.thread_messages.values())


@dataclass(frozen=True)
class Context:
    """Everything long-lived the model is told at the start of a run.

    A pure value: turning it into prompt text is `prompts.context_prompts.render_context`.
    `thread_memories` maps a thread (a task key) to the summary of its recent runs;
    `target_thread` is the thread the run works on (None for the top-level stream).
    """

    persona: str | None
    conversation_history: ChannelMessages
    workspace_long_term_memory: str | None = None
    workspace_short_term_memory: str | None = None
    channel_memories: Mapping[str, ChannelMemory] = field(default_factory=dict)
    thread_memories: Mapping[str, str] = field(default_factory=dict)
    target_thread: str | None = None

    def __post_init__(self) -> None:
        _optional_text(self.persona, "persona")
        if not isinstance(self.conversation_history, ChannelMessages):
            raise TypeError("conversation_history must be a ChannelMessages")
        _optional_text(self.workspace_long_term_memory, "workspace_long_term_memory")
        _optional_text(self.workspace_short_term_memory, "workspace_short_term_memory")
        channels = dict(self.channel_memories)
        for channel_id, memory in channels.items():
            if not isinstance(memory, ChannelMemory):
                raise TypeError(f"channel_memories[{channel_id!r}] must be a ChannelMemory")
            if memory.channel_id != channel_id:
                raise ValueError(f"channel_memories[{channel_id!r}] holds the memory of {memory.channel_id!r}")
        threads = dict(self.thread_memories)
        for thread_id, summary in threads.items():
            _require_text(thread_id, "a thread memory key")
            if not isinstance(summary, str):
                raise TypeError(f"thread_memories[{thread_id!r}] must be a string")
        _optional_text(self.target_thread, "target_thread")
        object.__setattr__(self, "channel_memories", MappingProxyType(channels))
        object.__setattr__(self, "thread_memories", MappingProxyType(threads))


@dataclass(frozen=True)
class Recollection:
    """The memories recalled for one task (SPEC 9.2): a `Context` but for its persona and
    conversation history, which the task's first turn adds (`context`). Read from the
    memory store before the first turn is built, so building it reads no store."""

    target_thread: str
    workspace_long_term_memory: str | None = None
    workspace_short_term_memory: str | None = None
    channel_memories: Mapping[str, ChannelMemory] = field(default_factory=dict)
    thread_memories: Mapping[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        object.__setattr__(self, "channel_memories", MappingProxyType(dict(self.channel_memories)))
        object.__setattr__(self, "thread_memories", MappingProxyType(dict(self.thread_memories)))

    def context(self, persona: str | None, history: ChannelMessages) -> Context:
        """The task's `Context`: these memories around its persona and conversation."""
        return Context(
            persona=persona,
            conversation_history=history,
            workspace_long_term_memory=self.workspace_long_term_memory,
            workspace_short_term_memory=self.workspace_short_term_memory,
            channel_memories=self.channel_memories,
            thread_memories=self.thread_memories,
            target_thread=self.target_thread,
        )

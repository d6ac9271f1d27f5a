"""Memories (SPEC 9.2): what goes into a run's `Context`, and what the model writes after it.

Reading: the task's repository memory (always: the run makes it active), the repositories
of the same organisation/group active within `active_channel_days`, and the thread
memories of this repository newer than `thread_memory_days`. The workspace memories are
derived from the repositories' records (which repositories are known and which were
active when); a repository's memory *text* is only ever shown in runs on that
repository, so nothing learnt in a private repository is repeated in another.

Writing: after a run that ended done, one more model request in the same conversation
(the server's prefix cache makes it cheap) asks for a JSON object with the repository's
new short-term memory, its updated long-term memory and a summary of the run. A reply
without usable JSON still leaves a thread memory: the run's final comment. A failed run
costs no model call (its budget may be what ran out): its thread memory is the reason.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, TypeVar

from coding_agent.config import MemoryConfig
from coding_agent.domain.channel import ChannelMemory, ChannelMessages, Context, Recollection
from coding_agent.domain.memories import ChannelRecord, channel_of, workspace_of
from coding_agent.domain.ports import MemoryRepository
from coding_agent.domain.tasks import TaskKey
from coding_agent.errors import AgentError
from coding_agent.llm.base import LLMClient
from coding_agent.llm.reply_text import JsonExtractionError, extract_json_object
from coding_agent.llm.types import LLMReply
from coding_agent.prompts.context_prompts import render_memory_request
from coding_agent.redaction import Redactor
from coding_agent.retry import through_store_outage

__all__ = ["MemoryKeeper", "MemoryUpdate", "parse_memory_reply", "derive_workspace_memories"]

log = logging.getLogger(__name__)

T = TypeVar("T")

DAY = 86400.0
MAX_LONG_TERM_CHARS = 4000
MAX_SHORT_TERM_CHARS = 2000
MAX_THREAD_CHARS = 2000
MAX_THREAD_MEMORIES = 10
_KEYS = {
    "long_term_memory": ("long_term_memory", "long_term", "long"),
    "short_term_memory": ("short_term_memory", "short_term", "short"),
    "thread_memory": ("thread_memory", "thread", "summary", "run_summary"),
}


@dataclass(frozen=True)
class MemoryUpdate:
    """What the model wrote; None where it wrote nothing usable."""

    long_term_memory: str | None
    short_term_memory: str | None
    thread_memory: str | None


def _clip(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: limit - 1].rstrip() + "…"


def _pick(data: dict[str, Any], field: str, limit: int) -> str | None:
    for name in _KEYS[field]:
        value = data.get(name)
        if isinstance(value, list):
            value = "\n".join(f"- {item}" for item in value if str(item).strip())
        if isinstance(value, str) and value.strip():
            return _clip(value.strip(), limit)
    return None


def parse_memory_reply(reply: LLMReply) -> MemoryUpdate | None:
    """The memory JSON from the reply's text, or from a tool call's arguments; None if absent."""
    candidates: list[dict[str, Any]] = []
    try:
        candidates.append(extract_json_object(reply.content))
    except JsonExtractionError:
        pass
    for call in reply.tool_calls:  # a model that insists on calling `done` with the JSON inside
        candidates.append(dict(call.arguments))
        for value in call.arguments.values():
            if isinstance(value, str):
                try:
                    candidates.append(extract_json_object(value))
                except JsonExtractionError:
                    pass
    for data in candidates:
        update = MemoryUpdate(
            _pick(data, "long_term_memory", MAX_LONG_TERM_CHARS),
            _pick(data, "short_term_memory", MAX_SHORT_TERM_CHARS),
            _pick(data, "thread_memory", MAX_THREAD_CHARS),
        )
        if update != MemoryUpdate(None, None, None):
            return update
    return None


def _day(timestamp: float) -> str:
    return datetime.fromtimestamp(timestamp, UTC).strftime("%Y-%m-%d")


def derive_workspace_memories(
    records: list[ChannelRecord], active_since: float
) -> tuple[str | None, str | None]:
    """(long-term, short-term) of an organisation/group, from its repositories' records."""
    if not records:
        return None, None
    known = ", ".join(sorted(record.channel_name for record in records))
    active = [record for record in records if record.last_active_at >= active_since]
    recent = ", ".join(f"{r.channel_name} (last run {_day(r.last_active_at)})" for r in active)
    return f"Repositories the agent has worked in: {known}.", (f"Recently active: {recent}." if recent else None)


def _answer_pending_tool_calls(llm: LLMClient) -> None:
    """Pair the last assistant turn's tool calls (e.g. `done`) with results: APIs require it."""
    answered = {m.get("tool_call_id") for m in llm.messages if m.get("role") == "tool"}
    for message in reversed(llm.messages):
        if message.get("role") != "assistant":
            continue
        for call in message.get("tool_calls") or []:
            if call.get("id") not in answered:
                llm.send_tool_result(call["id"], call["function"]["name"], "ok")
        return


class MemoryKeeper:
    """Reads memories into a `Context` and has the model write them after a run."""

    def __init__(
        self,
        store: MemoryRepository,
        config: MemoryConfig,
        redactor: Redactor,
        clock: Callable[[], float],
    ) -> None:
        self._store = store
        self._config = config
        self._redactor = redactor
        self._clock = clock

    # -- reading --------------------------------------------------------------------------

    def context_for(self, key: TaskKey, persona: str | None, history: ChannelMessages) -> Context:
        """The task's `Context`: its memories (`recall`) around `persona` and `history`."""
        return self.recall(key).context(persona, history)

    def recall(self, key: TaskKey) -> Recollection:
        """The memories of a run on `key`, as finished data for its first turn."""
        now = self._clock()
        channel_id, _ = channel_of(key)
        active_since = now - self._config.active_channel_days * DAY
        workspace = self._store.channels(workspace_of(key))
        memories: dict[str, ChannelMemory] = {}
        for record in workspace:
            if record.channel_id == channel_id or record.last_active_at >= active_since:
                memories[record.channel_id] = ChannelMemory(
                    record.channel_id, record.channel_name, record.long_term, record.short_term
                )
        others = [record for record in workspace if record.channel_id != channel_id]
        workspace_long, workspace_short = derive_workspace_memories(others, active_since)
        threads: dict[str, str] = {}
        since = now - self._config.thread_memory_days * DAY
        for thread in self._store.thread_memories(channel_id, since=since):
            if thread.thread_id not in threads and len(threads) < MAX_THREAD_MEMORIES:
                threads[thread.thread_id] = thread.summary
        return Recollection(
            target_thread=str(key),
            workspace_long_term_memory=workspace_long,
            workspace_short_term_memory=workspace_short,
            channel_memories=memories,
            thread_memories=threads,
        )

    # -- writing --------------------------------------------------------------------------

    async def after_run(self, llm: LLMClient, key: TaskKey, run_uuid: str, status: str, final_comment: str) -> None:
        """Write the memories of a run that ended `status`. Never raises: a run's outcome
        does not depend on its notes."""
        try:
            await self._write(llm, key, run_uuid, status, final_comment)
        except Exception:  # noqa: BLE001 - logged with its traceback, the run goes on
            log.exception("%s: memories of run %s not written", key, run_uuid)

    async def _write(self, llm: LLMClient, key: TaskKey, run_uuid: str, status: str, final_comment: str) -> None:
        if status == "done":
            update = await self._ask(llm, key)
            long_term = update.long_term_memory if update else None
            short_term = update.short_term_memory if update else None
            summary = (update.thread_memory if update else None) or _clip(final_comment.strip(), MAX_THREAD_CHARS)
            await self._stored(lambda: self._store.write_channel(key, self._redact(long_term), self._redact(short_term)), key)
        elif status == "failed":
            summary = _clip(f"The run failed: {final_comment.strip()}", MAX_THREAD_CHARS)
            await self._stored(lambda: self._store.touch_channel(key), key)
        else:
            return
        if summary:
            await self._stored(lambda: self._store.add_thread_memory(key, run_uuid, self._redactor.text(summary)), key)

    @staticmethod
    async def _stored(call: Callable[[], T], key: TaskKey) -> T:
        """A memory store call off the event loop, waiting through an outage of the store."""
        return await through_store_outage(call, f"{key}: memories")

    def _redact(self, text: str | None) -> str | None:
        return self._redactor.text(text) if text is not None else None

    async def _ask(self, llm: LLMClient, key: TaskKey) -> MemoryUpdate | None:
        channel = await self._stored(lambda: self._store.channel(channel_of(key)[0]), key)
        _answer_pending_tool_calls(llm)
        llm.send_user_message(
            render_memory_request(
                key.project,
                channel.long_term if channel else None,
                channel.short_term if channel else None,
            )
        )
        try:
            reply = await llm.get_response()
        except AgentError as error:
            log.warning("%s: the memory request failed (%s); the final comment is kept as the run's summary", key, error)
            return None
        update = parse_memory_reply(reply)
        if update is None:
            log.warning("%s: the memory reply had no usable JSON; the final comment is kept as the run's summary", key)
        return update

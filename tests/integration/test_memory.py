"""Memories (SPEC 9.2): the store on a real SQLite file, the keeper against the replay model."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from datetime import datetime, timezone
from pathlib import Path

import pytest

from coding_agent.config import MemoryConfig
from coding_agent.context.memory import MemoryKeeper, parse_memory_reply
from coding_agent.domain.channel import ChannelMessages
from coding_agent.domain.tasks import TaskKey
from coding_agent.llm.openai_client import OpenAICompatibleClient
from coding_agent.llm.types import LLMReply, ToolCallRequest
from coding_agent.prompts.context_prompts import render_context
from coding_agent.redaction import Redactor
from coding_agent.retry import RetryPolicy
from coding_agent.sandbox.replay_model import ReplaySandbox
from coding_agent.store.memories import MemoryStore
from coding_agent.store.state import StateStore

DAY = 86400.0
NOW = datetime(2026, 5, 1, tzinfo=timezone.utc).timestamp()
WIDGETS = TaskKey.parse("github:acme/widgets#1")
WIDGETS_2 = TaskKey.parse("github:acme/widgets#2")
GADGETS = TaskKey.parse("github:acme/gadgets#5")
OLD = TaskKey.parse("github:acme/old#9")
ELSEWHERE = TaskKey.parse("github:beta/tools#1")


class Clock:
    def __init__(self, now: float) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def store(tmp_path: Path) -> Iterator[StateStore]:
    state = StateStore(f"sqlite:///{tmp_path / 'state.db'}")
    yield state
    state.close()


def _history(key: TaskKey) -> ChannelMessages:
    return ChannelMessages(f"{key.forge}:{key.project}", key.project)


def test_context_holds_this_repository_recent_threads_and_active_neighbours(store: StateStore) -> None:
    clock = Clock(NOW - 30 * DAY)
    memories = MemoryStore(store.engine, clock)
    memories.write_channel(OLD, "OLD-LONG", "OLD-SHORT")  # active 30 days ago
    memories.add_thread_memory(WIDGETS_2, "r0", "EXPIRED-THREAD")
    clock.now = NOW - DAY
    memories.write_channel(WIDGETS, "Build with make.", "Fixed the parser.")
    memories.write_channel(GADGETS, "GADGETS-LONG", "GADGETS-SHORT")
    memories.write_channel(ELSEWHERE, "BETA-LONG", "BETA-SHORT")
    memories.add_thread_memory(WIDGETS_2, "r1", "Added docs.")
    memories.add_thread_memory(GADGETS, "r2", "GADGETS-THREAD")
    clock.now = NOW
    keeper = MemoryKeeper(memories, MemoryConfig(), Redactor([]), clock)

    context = keeper.context_for(WIDGETS, "A careful engineer.", _history(WIDGETS))

    assert set(context.channel_memories) == {"github:acme/widgets", "github:acme/gadgets"}, "active, same workspace"
    assert context.channel_memories["github:acme/widgets"].long_term_memory == "Build with make."
    assert dict(context.thread_memories) == {"github:acme/widgets#2": "Added docs."}
    assert context.workspace_long_term_memory == "Repositories the agent has worked in: acme/gadgets, acme/old."
    assert context.workspace_short_term_memory == "Recently active: acme/gadgets (last run 2026-04-30)."
    text = render_context(context)
    assert "## Persona\nA careful engineer." in text
    assert "Long-term (durable facts):\nBuild with make." in text and "Fixed the parser." in text
    assert "- github:acme/widgets#2: Added docs." in text
    for foreign in ("GADGETS-", "OLD-", "BETA-", "EXPIRED-THREAD"):
        assert foreign not in text, f"{foreign} is another repository's (or an expired) memory"


def test_a_new_repository_gets_an_empty_context(store: StateStore) -> None:
    keeper = MemoryKeeper(MemoryStore(store.engine), MemoryConfig(), Redactor([]), Clock(NOW))
    context = keeper.context_for(WIDGETS, None, _history(WIDGETS))
    assert dict(context.channel_memories) == {} and dict(context.thread_memories) == {}
    assert render_context(context) == ""


def test_clear_forgets_one_repository(store: StateStore) -> None:
    memories = MemoryStore(store.engine)
    memories.write_channel(WIDGETS, "a", "b")
    memories.add_thread_memory(WIDGETS, "r", "c")
    memories.write_channel(GADGETS, "d", "e")
    assert memories.clear("github:acme/widgets") == 2
    assert memories.channel("github:acme/widgets") is None and memories.thread_memories("github:acme/widgets") == []
    assert memories.channel("github:acme/gadgets") is not None


@pytest.mark.parametrize(
    "reply",
    [
        LLMReply('Sure!\n```json\n{"long_term_memory": "L", "short_term_memory": "S", "thread_memory": "T"}\n```'),
        LLMReply("", (ToolCallRequest("c1", "done", {"comment": '{"long_term_memory": "L", "short_term_memory": "S", "thread_memory": "T"}'}),)),
        LLMReply('<think>hmm {"x": 1}</think>{"long_term": ["L"], "short_term": "S", "summary": "T"}'),
    ],
    ids=["fenced", "inside-a-tool-call", "aliases-and-think"],
)
def test_memory_replies_are_parsed_robustly(reply: LLMReply) -> None:
    update = parse_memory_reply(reply)
    assert update is not None
    assert (update.long_term_memory or "").endswith("L") and update.short_term_memory == "S" and update.thread_memory == "T"


def test_a_reply_without_memory_json_is_none() -> None:
    assert parse_memory_reply(LLMReply("I am done.")) is None


def _client(model: ReplaySandbox) -> OpenAICompatibleClient:
    return OpenAICompatibleClient(model="replay", base_url=model.openai_base_url, api_key="k", retry=RetryPolicy(retries=0))


def test_after_a_done_run_the_model_writes_the_memories(store: StateStore) -> None:
    secret = "ghp_" + "MemorySecretToken0123456789abcdef"
    memory_json = (
        '{"long_term_memory": "Run pytest. Token ' + secret + '", "short_term_memory": "Wrote hello.txt.",'
        ' "thread_memory": "Issue 1: added hello.txt."}'
    )
    script = {"replies": [{"done": "All done."}, {"text": memory_json}]}
    memories = MemoryStore(store.engine)
    keeper = MemoryKeeper(memories, MemoryConfig(), Redactor([secret]), Clock(NOW))

    async def run() -> list[dict]:  # type: ignore[type-arg]
        with ReplaySandbox(script) as model:
            llm = _client(model)
            llm.send_system_prompt("system")
            llm.send_user_message("Task: add hello.txt")
            llm.set_tools([])
            await llm.get_response()
            await keeper.after_run(llm, WIDGETS, "run-1", "done", "All done.")
            await llm.aclose()
            return model.requests[-1].body["messages"]

    last_messages = asyncio.run(run())
    assert "update your notes about the repository acme/widgets" in last_messages[-1]["content"]
    channel = memories.channel("github:acme/widgets")
    assert channel is not None and channel.short_term == "Wrote hello.txt."
    assert channel.long_term == "Run pytest. Token ***", "secrets never reach the memory store"
    [thread] = memories.thread_memories("github:acme/widgets")
    assert (thread.thread_id, thread.run_uuid, thread.summary) == ("github:acme/widgets#1", "run-1", "Issue 1: added hello.txt.")


def test_a_failed_run_leaves_its_reason_without_a_model_call(store: StateStore) -> None:
    memories = MemoryStore(store.engine)
    keeper = MemoryKeeper(memories, MemoryConfig(), Redactor([]), Clock(NOW))

    async def run() -> int:
        with ReplaySandbox({"replies": []}) as model:
            llm = _client(model)
            await keeper.after_run(llm, WIDGETS, "run-2", "failed", "The step limit was reached.")
            await llm.aclose()
            return len(model.requests)

    assert asyncio.run(run()) == 0
    [thread] = memories.thread_memories("github:acme/widgets")
    assert thread.summary == "The run failed: The step limit was reached."

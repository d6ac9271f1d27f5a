"""Every provider x every reply protocol, through the real clients, against the replay server."""

from __future__ import annotations

import asyncio
import json
import socket
from collections.abc import Callable, Iterator
from typing import Any

import ollama
import openai
import pytest

from coding_agent.config import LLMConfig
from coding_agent.errors import ConfigError, LLMError, TransientError
from coding_agent.llm.base import LLMClient
from coding_agent.llm.factory import create_llm_client
from coding_agent.llm.ollama_client import OllamaClient
from coding_agent.llm.openai_client import OpenAICompatibleClient
from coding_agent.llm.protocols import create_protocol
from coding_agent.llm.types import ToolSpec
from coding_agent.retry import RetryPolicy
from coding_agent.sandbox.replay_model import ReplaySandbox, ScriptSource

FAST_RETRY = RetryPolicy(retries=3, base_delay=0.01, max_delay=0.05)
API_KEY = "sk-test-secret-4242"
CONTEXT_LENGTH = 12345

CREATE_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "path": {"type": "string"},
        "content": {"type": "string"},
        "options": {"type": "object", "properties": {"mode": {"type": "string", "enum": ["w", "a"]}}},
    },
    "required": ["path", "content"],
    "additionalProperties": False,
}
TOOLS = [
    ToolSpec("workspace/create", "Create a file", CREATE_SCHEMA),
    ToolSpec("workspace/read", "Read a file", {"type": "object", "properties": {"path": {"type": "string"}}}),
]
SCRIPT: dict[str, Any] = {
    "replies": [
        {"tool": "workspace/create", "args": {"path": "hello.txt", "content": "hi"}, "comment": "Creating the file"},
        {"done": "Finished: wrote hello.txt"},
    ]
}
PROVIDERS = ["openai", "lmstudio", "ollama"]

Replay = Callable[[ScriptSource], ReplaySandbox]


@pytest.fixture(scope="module")
def server() -> Iterator[ReplaySandbox]:
    """One replay server for the module; each test loads its own script (fast)."""
    with ReplaySandbox({}) as sandbox:
        yield sandbox


@pytest.fixture
def replay(server: ReplaySandbox) -> Replay:
    def play(script: ScriptSource) -> ReplaySandbox:
        server.model.load(script)
        return server

    return play


def llm_config(provider: str, sandbox: ReplaySandbox, function_calling: bool = True, **extra: Any) -> LLMConfig:
    section: dict[str, Any] = {"model": "replay-model", "context_length": CONTEXT_LENGTH, **extra}
    if provider == "ollama":
        section["endpoint"] = sandbox.url
    else:
        section["base_url"] = sandbox.openai_base_url
        if provider == "openai" or "api_key" in extra:
            section["api_key"] = API_KEY
    return LLMConfig.model_validate({"provider": provider, "function_calling": function_calling, provider: section})


async def run_two_steps(llm: LLMClient, function_calling: bool, issue: str) -> tuple[Any, Any]:
    """The loop's calls for one tool step and the final step; returns both decisions."""
    protocol = create_protocol(function_calling)
    llm.send_system_prompt("You are a coding agent.\n" + protocol.instructions())
    protocol.prepare(llm, TOOLS)
    llm.send_user_message(issue)
    first = protocol.parse(await llm.get_response())
    for action in first.actions:
        protocol.send_tool_result(llm, action, "created hello.txt (2 bytes)", is_error=False)
    second = protocol.parse(await llm.get_response())
    return first, second


@pytest.mark.parametrize("function_calling", [False, True], ids=["json_text", "tool_calls"])
@pytest.mark.parametrize("provider", PROVIDERS)
async def test_scripted_conversation(replay: Replay, provider: str, function_calling: bool) -> None:
    sandbox = replay(SCRIPT)
    llm = create_llm_client(llm_config(provider, sandbox, function_calling), FAST_RETRY)
    seen_usage: list[int] = []
    llm.on_usage(lambda usage: seen_usage.append(usage.total_tokens))
    try:
        first, second = await run_two_steps(llm, function_calling, "Issue #1: create hello.txt")
    finally:
        await llm.aclose()
    requests = sandbox.requests

    assert first.error is None and first.done is False
    assert first.comment == "Creating the file"
    assert [(a.tool, a.args) for a in first.actions] == [("workspace/create", {"path": "hello.txt", "content": "hi"})]
    assert (first.actions[0].call_id is not None) == function_calling
    assert second.done is True and second.comment == "Finished: wrote hello.txt" and second.actions == ()
    assert llm.usage.prompt_tokens > 0 and llm.usage.completion_tokens > 0
    assert len(seen_usage) == 2 and all(total > 0 for total in seen_usage)

    assert len(requests) == 2
    bodies = [request.body for request in requests]
    history_sent = json.dumps(bodies[1]["messages"])
    assert "created hello.txt (2 bytes)" in history_sent
    if provider == "ollama":
        assert requests[0].path == "/api/chat"
        assert all(body["options"]["num_ctx"] == CONTEXT_LENGTH for body in bodies)
    else:
        assert requests[0].path == "/v1/chat/completions"
    if function_calling:
        offered = {tool["function"]["name"]: tool["function"]["parameters"] for tool in bodies[0]["tools"]}
        assert set(offered) == {"workspace__create", "workspace__read", "done"}
        assert offered["workspace__create"] == CREATE_SCHEMA  # the full schema, nested parts too
        assistant = bodies[1]["messages"][2]
        assert assistant["tool_calls"][0]["function"]["name"] == "workspace__create"
        assert bodies[1]["messages"][3]["role"] == "tool"
    else:
        assert not bodies[0].get("tools")
        assert '"previous_output"' in bodies[1]["messages"][-1]["content"]


@pytest.mark.parametrize("function_calling", [False, True], ids=["json_text", "tool_calls"])
async def test_the_request_body_is_the_one_the_sdks_typed_create_sends(replay: Replay, function_calling: bool) -> None:
    """The client sends all but `model` as `extra_body`, skipping the SDK's typed walk of
    the history: the body must be exactly (key order too) what `create(**body)` sends."""
    sandbox = replay({"replies": [*SCRIPT["replies"], {"done": "again"}]})
    llm = create_llm_client(llm_config("openai", sandbox, function_calling), FAST_RETRY)
    assert isinstance(llm, OpenAICompatibleClient)
    try:
        await run_two_steps(llm, function_calling, "Issue #1: create hello.txt ✓ \"quoted\"")
        sent = sandbox.requests[-1].body
        await llm._client.chat.completions.create(**sent)
    finally:
        await llm.aclose()
    reference = sandbox.requests[-1].body
    assert len(sandbox.requests) == 3 and list(sent) == list(reference) and sent == reference
    assert [m["role"] for m in sent["messages"]][-2:] == (["assistant", "tool"] if function_calling else ["assistant", "user"])


async def test_history_sent_again_follows_a_changed_tool_list(replay: Replay) -> None:
    """A new tool list can rename earlier calls on the wire (here a name colliding with
    `workspace/create`'s plain form gives both a hash suffix): the history sent must then
    carry the new names, and the same names while the tool list stays."""
    sandbox = replay({"replies": [{"done": "one"}, {"done": "two"}, {"done": "three"}]})
    llm = create_llm_client(llm_config("openai", sandbox, True), FAST_RETRY)
    call = {"id": "c1", "type": "function", "function": {"name": "workspace/create", "arguments": {"path": "a"}}}
    llm.messages[:] = [
        {"role": "system", "content": "rules"},
        {"role": "user", "content": "task"},
        {"role": "assistant", "content": "", "tool_calls": [call]},
        {"role": "tool", "tool_call_id": "c1", "name": "workspace/create", "content": "ok"},
    ]
    try:
        llm.set_tools(TOOLS)
        await llm.get_response()
        await llm.get_response()
        llm.set_tools([*TOOLS, ToolSpec("workspace__create", "Collides", CREATE_SCHEMA)])
        await llm.get_response()
    finally:
        await llm.aclose()
    names = [request.body["messages"][2]["tool_calls"][0]["function"]["name"] for request in sandbox.requests]
    offered = [tool["function"]["name"] for tool in sandbox.requests[2].body["tools"]]
    assert names[0] == names[1] == "workspace__create"
    assert names[2] != "workspace__create" and names[2] in offered
    assert sandbox.requests[1].body["messages"][:4] == sandbox.requests[0].body["messages"][:4]


@pytest.mark.parametrize("provider", PROVIDERS)
async def test_transient_errors_are_retried(replay: Replay, provider: str) -> None:
    script = {"replies": [{"status": 503}, {"status": 503, "retry_after": 0}, *SCRIPT["replies"]]}
    sandbox = replay(script)
    llm = create_llm_client(llm_config(provider, sandbox), FAST_RETRY)
    try:
        first, _ = await run_two_steps(llm, True, "Issue #2")
    finally:
        await llm.aclose()
    assert len(sandbox.requests) == 4  # two failures, the retry that worked, the final step
    assert first.actions[0].tool == "workspace/create"
    assert first.actions[0].args == {"path": "hello.txt", "content": "hi"}


@pytest.mark.parametrize("provider", PROVIDERS)
async def test_rate_limit_carries_retry_after(replay: Replay, provider: str) -> None:
    script = {"replies": [{"status": 429, "retry_after": 7, "message": "slow down"}]}
    sandbox = replay(script)
    llm = create_llm_client(llm_config(provider, sandbox), RetryPolicy(retries=0))
    llm.send_user_message("Issue #3")
    try:
        with pytest.raises(TransientError) as caught:
            await llm.get_response()
    finally:
        await llm.aclose()
    assert caught.value.retry_after == pytest.approx(7.0, abs=0.5)
    assert "429" in str(caught.value) and "slow down" in str(caught.value)


@pytest.mark.parametrize("provider", ["openai", "lmstudio"])
async def test_client_error_is_final_and_never_shows_the_api_key(replay: Replay, provider: str) -> None:
    message = f"Incorrect API key provided: {API_KEY}"
    sandbox = replay({"replies": [{"status": 400, "message": message}, {"done": "never reached"}]})
    llm = create_llm_client(llm_config(provider, sandbox, api_key=API_KEY), FAST_RETRY)
    llm.send_user_message("Issue #4")
    try:
        with pytest.raises(LLMError) as caught:
            await llm.get_response()
    finally:
        await llm.aclose()
    assert len(sandbox.requests) == 1  # a 4xx is not retried
    text = str(caught.value)
    assert "400" in text and "Incorrect API key provided" in text
    assert API_KEY not in text
    assert llm.messages[-1]["role"] == "user"  # nothing appended for a failed turn


async def test_ollama_client_error_is_final(replay: Replay) -> None:
    sandbox = replay({"replies": [{"status": 404, "message": "model 'nope' not found"}]})
    llm = create_llm_client(llm_config("ollama", sandbox), FAST_RETRY)
    llm.send_user_message("Issue #4")
    try:
        with pytest.raises(LLMError, match="HTTP 404: model 'nope' not found"):
            await llm.get_response()
    finally:
        await llm.aclose()
    assert len(sandbox.requests) == 1


def _closed_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


@pytest.mark.parametrize("provider", ["openai", "ollama"])
async def test_unreachable_server_is_transient(provider: str) -> None:
    url = f"http://127.0.0.1:{_closed_port()}"
    llm: LLMClient
    if provider == "ollama":
        llm = OllamaClient(model="m", endpoint=url, retry=RetryPolicy(retries=1, base_delay=0.01))
    else:
        llm = OpenAICompatibleClient(
            model="m", base_url=f"{url}/v1", api_key=API_KEY, retry=RetryPolicy(retries=1, base_delay=0.01)
        )
    llm.send_user_message("hello")
    try:
        with pytest.raises(TransientError, match="cannot reach"):
            await llm.get_response()
    finally:
        await llm.aclose()


@pytest.mark.parametrize("provider", ["openai", "ollama"])
async def test_timeout_is_transient(replay: Replay, provider: str) -> None:
    sandbox = replay({"latency_seconds": 0.6, "replies": [{"done": "late"}]})
    llm = create_llm_client(llm_config(provider, sandbox, timeout_seconds=0.1), RetryPolicy(retries=0))
    llm.send_user_message("hello")
    try:
        with pytest.raises(TransientError, match="timed out"):
            await llm.get_response()
    finally:
        await llm.aclose()


@pytest.mark.parametrize("provider", PROVIDERS)
async def test_concurrent_conversations_each_get_the_whole_script(replay: Replay, provider: str) -> None:
    sandbox = replay(SCRIPT)
    clients = [create_llm_client(llm_config(provider, sandbox), FAST_RETRY) for _ in range(2)]
    try:
        results = await asyncio.gather(
            *(run_two_steps(llm, True, f"Issue #{n}: create hello.txt") for n, llm in enumerate(clients, 10))
        )
    finally:
        for llm in clients:
            await llm.aclose()
    conversations = {request.conversation for request in sandbox.requests}
    assert len(conversations) == 2
    for first, second in results:
        assert first.actions[0].tool == "workspace/create"
        assert second.done and second.comment == "Finished: wrote hello.txt"


async def test_lmstudio_works_without_an_api_key_and_openai_sends_the_configured_one(replay: Replay) -> None:
    sandbox = replay(SCRIPT)
    for provider in ("lmstudio", "openai"):
        llm = create_llm_client(llm_config(provider, sandbox), FAST_RETRY)
        llm.send_user_message(f"Issue for {provider}")
        try:
            reply = await llm.get_response()
        finally:
            await llm.aclose()
        assert "workspace/create" in reply.content  # JSON text: no tools were offered
    sent_keys = [request.headers["authorization"] for request in sandbox.requests]
    assert sent_keys == ["Bearer lm-studio", f"Bearer {API_KEY}"]


async def test_unparseable_tool_arguments_are_reported_and_the_next_request_stays_valid(replay: Replay) -> None:
    script = {
        "replies": [
            {"text": "Writing", "tool_calls": [{"name": "workspace__create", "arguments": "{path: oops"}]},
            {"done": "ok"},
        ]
    }
    sandbox = replay(script)
    llm = create_llm_client(llm_config("openai", sandbox), FAST_RETRY)
    protocol = create_protocol(True)
    protocol.prepare(llm, TOOLS)
    llm.send_user_message("Issue #5")
    try:
        decision = protocol.parse(await llm.get_response())
        assert decision.error is not None and "{path: oops" in decision.error
        llm.send_user_message(protocol.correction_message(decision.error))
        final = protocol.parse(await llm.get_response())
    finally:
        await llm.aclose()
    sent = sandbox.requests[1].body["messages"]
    assert final.done and final.comment == "ok"
    assert sent[1]["tool_calls"][0]["function"]["arguments"] == "{path: oops"  # sent back as the model wrote it
    assert sent[2]["role"] == "tool" and sent[2]["tool_call_id"] == sent[1]["tool_calls"][0]["id"]
    assert sent[3]["role"] == "user" and "could not be used" in sent[3]["content"]


async def test_openai_sdk_streaming_parses_text_tool_calls_and_usage(replay: Replay) -> None:
    sandbox = replay(SCRIPT)
    client = openai.AsyncOpenAI(base_url=sandbox.openai_base_url, api_key=API_KEY, max_retries=0)
    tools = [{"type": "function", "function": {"name": "workspace__create", "parameters": CREATE_SCHEMA}}]
    try:
        stream = await client.chat.completions.create(
            model="replay-model",
            messages=[{"role": "user", "content": "Issue #6"}],
            tools=tools,
            stream=True,
            stream_options={"include_usage": True},
        )
        content, names, arguments, usage, finish = "", [], "", None, None
        async for chunk in stream:
            if chunk.usage is not None:
                usage = chunk.usage
            for choice in chunk.choices:
                content += choice.delta.content or ""
                finish = choice.finish_reason or finish
                for call in choice.delta.tool_calls or []:
                    if call.function and call.function.name:
                        names.append(call.function.name)
                    arguments += (call.function.arguments or "") if call.function else ""
        # The next turn of the same conversation, plain text and not streamed as tool calls.
        final = await client.chat.completions.create(
            model="replay-model", messages=[{"role": "user", "content": "Issue #6"}], stream=True
        )
        final_text = "".join([chunk.choices[0].delta.content or "" async for chunk in final if chunk.choices])
    finally:
        await client.close()
    assert content == "Creating the file"
    assert names == ["workspace__create"]
    assert json.loads(arguments) == {"path": "hello.txt", "content": "hi"}
    assert finish == "tool_calls"
    assert usage is not None and usage.prompt_tokens > 0 and usage.completion_tokens > 0
    assert json.loads(final_text) == {"done": True, "comment": "Finished: wrote hello.txt"}


async def test_ollama_library_streaming_parses_ndjson(replay: Replay) -> None:
    sandbox = replay(SCRIPT)
    client = ollama.AsyncClient(host=sandbox.url)
    tools = [{"type": "function", "function": {"name": "workspace__create", "parameters": {"type": "object"}}}]
    parts = [
        part
        async for part in await client.chat(
            model="replay-model", messages=[{"role": "user", "content": "Issue #7"}], tools=tools, stream=True
        )
    ]
    await client.close()
    assert parts[-1].done is True and (parts[-1].eval_count or 0) > 0 and (parts[-1].prompt_eval_count or 0) > 0
    assert "".join(part.message.content or "" for part in parts) == "Creating the file"
    calls = [call for part in parts for call in part.message.tool_calls or []]
    assert [(c.function.name, dict(c.function.arguments)) for c in calls] == [
        ("workspace__create", {"path": "hello.txt", "content": "hi"})
    ]


def test_factory_picks_the_client_of_the_provider(replay: Replay) -> None:
    sandbox = replay(SCRIPT)
    assert isinstance(create_llm_client(llm_config("ollama", sandbox), FAST_RETRY), OllamaClient)
    assert isinstance(create_llm_client(llm_config("lmstudio", sandbox), FAST_RETRY), OpenAICompatibleClient)


def test_factory_refuses_openai_without_a_key() -> None:
    config = LLMConfig.model_validate({"provider": "openai", "openai": {"model": "gpt-4o-mini"}})
    with pytest.raises(ConfigError, match="OPENAI_API_KEY"):
        create_llm_client(config, FAST_RETRY)

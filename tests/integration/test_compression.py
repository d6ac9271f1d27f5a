"""Compression (SPEC 9.3) with the real OpenAI client, the replay model and real files."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

from coding_agent.context.compression import Compressor, estimate_tokens, model_summarizer
from coding_agent.context.storage import ContextStorage
from coding_agent.llm.openai_client import OpenAICompatibleClient
from coding_agent.llm.types import TokenUsage
from coding_agent.prompts.context_prompts import SUMMARY_HEADING
from coding_agent.redaction import Redactor
from coding_agent.retry import RetryPolicy
from coding_agent.sandbox.replay_model import ReplaySandbox

SCRIPT = {"conversations": [{"match": "Summarise the earlier part", "replies": [{"text": "SUMMARY: read a.py, fixed b.py."}]}]}


def _lines(path: Path) -> list[dict]:  # type: ignore[type-arg]
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def _native_history(llm: OpenAICompatibleClient, steps: int) -> None:
    llm.send_system_prompt("You are a coding agent.")
    llm.send_user_message("Task: fix the parser.")
    for n in range(steps):
        call = {"id": f"c{n}", "type": "function", "function": {"name": "workspace/view", "arguments": f'{{"path": "f{n}.py"}}'}}
        llm.messages.append({"role": "assistant", "content": f"Reading f{n}.py", "tool_calls": [call]})
        llm.send_tool_result(f"c{n}", "workspace/view", "x = 1\n" * 100)


def test_over_the_threshold_older_messages_become_one_summary(tmp_path: Path) -> None:
    usage: list[TokenUsage] = []

    async def run() -> tuple[list[dict], list[dict], Path, int]:  # type: ignore[type-arg]
        with ReplaySandbox(SCRIPT) as model:

            def client() -> OpenAICompatibleClient:
                return OpenAICompatibleClient(model="r", base_url=model.openai_base_url, api_key="k", retry=RetryPolicy(retries=0))

            llm = client()
            _native_history(llm, 6)
            files = ContextStorage(tmp_path, Redactor([])).start_run("run-1")
            files.sync_messages(llm.messages)
            before = list(llm.messages)
            tokens = estimate_tokens(before)
            compressor = Compressor(tokens, 0.7, 5, model_summarizer(client, usage.append))
            assert await compressor.maybe_compress(llm, files)
            await llm.aclose()
            return before, list(llm.messages), files.directory, len(model.requests)

    before, after, directory, requests = asyncio.run(run())

    assert requests == 1, "one summary request"
    assert after[:2] == before[:2], "system prompt and task prompt stay"
    assert after[2]["role"] == "user" and after[2]["content"] == f"{SUMMARY_HEADING}\nSUMMARY: read a.py, fixed b.py."
    assert after[3]["role"] == "assistant" and after[3:] == before[-6:], "the tail starts at the tool call, not its result"
    assert usage and usage[0].prompt_tokens > 0, "the summary request's tokens count towards the run"
    [summary] = _lines(directory / "summaries.jsonl")
    assert summary["summarised_messages"] == len(before) - 2 - 6 and summary["kept_messages"] == 6
    assert summary["tokens_after"] < summary["tokens_before"]
    assert len(_lines(directory / "messages.jsonl")) == len(before), "messages.jsonl keeps the full history"
    assert _lines(directory / "current.jsonl") == after


def test_under_the_threshold_nothing_changes(tmp_path: Path) -> None:
    async def run() -> tuple[bool, int]:
        with ReplaySandbox(SCRIPT) as model:
            llm = OpenAICompatibleClient(model="r", base_url=model.openai_base_url, api_key="k", retry=RetryPolicy(retries=0))
            _native_history(llm, 6)
            files = ContextStorage(tmp_path, Redactor([])).start_run("run-2")
            snapshot = list(llm.messages)
            compressor = Compressor(10 * estimate_tokens(snapshot), 0.7, 5, model_summarizer(lambda: llm, lambda u: None))
            changed = await compressor.maybe_compress(llm, files)
            assert llm.messages == snapshot
            await llm.aclose()
            return changed, len(model.requests)

    assert asyncio.run(run()) == (False, 0)


def test_a_failing_summary_request_falls_back_to_a_plain_list(tmp_path: Path) -> None:
    async def run() -> list[dict]:  # type: ignore[type-arg]
        with ReplaySandbox({"replies": [{"status": 400, "message": "bad request"}]}) as model:

            def client() -> OpenAICompatibleClient:
                return OpenAICompatibleClient(model="r", base_url=model.openai_base_url, api_key="k", retry=RetryPolicy(retries=0))

            llm = client()
            _native_history(llm, 6)
            files = ContextStorage(tmp_path, Redactor([])).start_run("run-3")
            compressor = Compressor(estimate_tokens(llm.messages), 0.7, 5, model_summarizer(client, lambda u: None))
            assert await compressor.maybe_compress(llm, files)
            await llm.aclose()
            return llm.messages

    messages = asyncio.run(run())
    assert messages[2]["content"].startswith(SUMMARY_HEADING)
    assert "- assistant: Reading f0.py [called workspace/view]" in messages[2]["content"]


def test_each_request_is_weighed_on_the_history_as_it_is_then(tmp_path: Path) -> None:
    """Compression comes at the first request over the limit, however the history got
    there: grown step by step, compressed, its last message edited, replaced whole."""

    async def summarize(messages: list[dict]) -> str:  # type: ignore[type-arg]
        return "SUMMARY"

    async def run() -> list[tuple[bool, bool]]:
        llm = OpenAICompatibleClient(model="r", base_url="http://127.0.0.1:9/v1", api_key="k", retry=RetryPolicy(retries=0))
        llm.send_system_prompt("You are a coding agent.")
        llm.send_user_message("Task: fix the parser.")
        files = ContextStorage(tmp_path, Redactor([])).start_run("run-4")
        compressor = Compressor(4 * estimate_tokens(llm.messages) + 400, 0.7, 2, summarize)
        outcomes: list[tuple[bool, bool]] = []

        async def request() -> None:
            over = estimate_tokens(llm.messages, llm.tools) > compressor.limit
            outcomes.append((over, await compressor.maybe_compress(llm, files)))

        for n in range(13):
            llm.send_user_message(f"step {n}: " + "x = 1\n" * 20)
            await request()
        llm.messages[-1]["content"] = "short"  # edited in place: lighter now
        await request()
        llm.messages[-1]["content"] = "x = 1\n" * 300  # and heavier
        await request()
        llm.messages[:] = [*llm.messages[:2], *({"role": "user", "content": f"y = {n}\n" * 60} for n in range(6))]
        await request()  # replaced whole
        await llm.aclose()
        return outcomes

    outcomes = asyncio.run(run())
    assert all(over == compressed for over, compressed in outcomes), outcomes
    assert sum(compressed for _, compressed in outcomes) >= 3, "growth, an edit and a replacement each went over"

"""Prompt size per step and prompt-cache friendliness over a 30-step run (SPEC 9.3, 13).

One task through `AgentService.run_cycle()` (sandbox GitHub, replay model over HTTP, the
built-in workspace server): 30 tool steps whose output grows the history, then done. For
every request of the run (the summary requests of compressions are counted apart) it
reports the estimated prompt tokens and the share of the previous request's prompt that
the request repeats as its prefix: the part a server with prefix caching (llama.cpp,
Ollama, vLLM) does not compute again. Target: 100% between compressions.

Two scenarios: a context window large enough for the whole run (no compression), and a
small one (`--small-context`, default 6000 tokens) so that the run compresses on the
way; both with the native tool-calling protocol and, with `--protocol json_text`, JSON.

Run: `python benchmarks/bench_context.py [--steps 30] [--small-context 6000] [--protocol tool_calls]`
"""

from __future__ import annotations

import argparse
import asyncio
import json
import tempfile
from pathlib import Path
from typing import Any

from _common import emit, open_labelled_issues, seed_github

from coding_agent.config import parse_config
from coding_agent.context.compression import estimate_tokens
from coding_agent.prompts.context_prompts import SUMMARY_HEADING
from coding_agent.runtime.service import AgentService
from coding_agent.sandbox.github import GitHubSandbox, GitHubState
from coding_agent.sandbox.replay_model import ReplaySandbox

REPO = "acme/bench"
USER = "maintainer"
BOT = "bench-bot"
BOT_TOKEN = "bench-bot-token"
SUMMARY_MATCH = "Summarise the earlier part"
LARGE_CONTEXT = 131072


def _script(steps: int) -> dict[str, Any]:
    replies: list[dict[str, Any]] = [
        {"tool": "workspace/run", "args": {"command": f"seq 1 {100 + 10 * n}"}, "comment": f"Step {n + 1}: listing."}
        for n in range(steps)
    ]
    replies.append({"done": "Finished."})
    summary = {"text": "The agent ran seq with growing limits; every run succeeded."}
    return {"conversations": [{"match": SUMMARY_MATCH, "replies": [summary]}], "replies": replies}


def _size(messages: list[dict[str, Any]]) -> int:
    return len(json.dumps(messages, ensure_ascii=False))


def _prefix_share(previous: list[dict[str, Any]], current: list[dict[str, Any]]) -> float:
    """Share (by serialised size) of `previous` that `current` starts with, message by message."""
    common = 0
    for mine, theirs in zip(previous, current):
        if mine != theirs:
            break
        common += 1
    return _size(previous[:common]) / _size(previous) if previous else 1.0


def _is_summary_request(messages: list[dict[str, Any]]) -> bool:
    first_user = next((str(m.get("content")) for m in messages if m.get("role") == "user"), "")
    return SUMMARY_MATCH in first_user


def _summary_of(messages: list[dict[str, Any]]) -> str | None:
    return next((str(m["content"]) for m in messages if SUMMARY_HEADING in str(m.get("content"))), None)


async def _scenario(steps: int, context_length: int, protocol: str) -> dict[str, Any]:
    state = GitHubState()
    seed_github(state, [REPO], USER, BOT, BOT_TOKEN)
    open_labelled_issues(state, "github", [REPO], 1, USER)
    with tempfile.TemporaryDirectory() as directory, GitHubSandbox(state) as forge, ReplaySandbox(_script(steps)) as model:
        root = Path(directory)
        config = parse_config(
            {
                "task_source": "github",
                "github": {"api_url": forge.url, "token": BOT_TOKEN, "owner": "acme", "bot_name": BOT},
                "llm": {
                    "provider": "openai",
                    "function_calling": protocol == "tool_calls",
                    "openai": {"base_url": model.openai_base_url, "model": "replay", "api_key": "k", "context_length": context_length},
                },
                "workspace": {"base_dir": str(root / "workspaces")},
                "context_storage": {"base_dir": str(root / "contexts")},
                "logging": {"dir": str(root / "logs")},
                "database": {"url": f"sqlite:///{root / 'state.db'}"},
                "memory": {"enabled": False},
                "max_llm_process_num": steps + 5,
            },
            env={},
        )
        service = AgentService(config)
        try:
            report = await service.run_cycle()
        finally:
            await service.aclose()
        bodies = [request.body["messages"] for request in model.requests]

    run = [messages for messages in bodies if not _is_summary_request(messages)]
    rows: list[dict[str, Any]] = []
    between: list[float] = []
    for index, messages in enumerate(run):
        # A compression replaces older messages by a summary: the history shrinks (or its summary changes).
        compressed = index > 0 and _summary_of(messages) is not None and (
            len(messages) < len(run[index - 1]) or _summary_of(messages) != _summary_of(run[index - 1])
        )
        share = _prefix_share(run[index - 1], messages) if index else None
        if share is not None and not compressed:
            between.append(share)
        rows.append(
            {
                "request": index + 1,
                "messages": len(messages),
                "prompt_tokens_estimated": estimate_tokens(messages),
                "prefix_repeat_share": None if share is None else round(share, 4),
                "compressed_before": compressed,
            }
        )
    tokens = [row["prompt_tokens_estimated"] for row in rows]
    return {
        "context_length": context_length,
        "threshold_tokens": int(context_length * config.context_storage.compression_threshold),
        "status": [result.status for result in report.results],
        "requests": len(run),
        "summary_requests": len(bodies) - len(run),
        "compressions": sum(1 for row in rows if row["compressed_before"]),
        "prompt_tokens_first_last_max": [tokens[0], tokens[-1], max(tokens)] if tokens else [],
        "prefix_repeat_share_between_compressions": {
            "min": round(min(between), 4) if between else None,
            "mean": round(sum(between) / len(between), 4) if between else None,
            "requests": len(between),
        },
        "per_request": rows,
    }


async def _main(steps: int, small_context: int, protocol: str) -> None:
    large = await _scenario(steps, LARGE_CONTEXT, protocol)
    small = await _scenario(steps, small_context, protocol)
    met = all(
        scenario["prefix_repeat_share_between_compressions"]["min"] == 1.0 for scenario in (large, small)
    ) and small["compressions"] >= 1
    emit(
        {
            "benchmark": "bench_context",
            "steps": steps,
            "protocol": protocol,
            "target": "every request repeats 100% of the previous prompt as its prefix between compressions",
            "met": met,
            "no_compression": large,
            "with_compression": small,
        }
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=30)
    parser.add_argument("--small-context", type=int, default=6000)
    parser.add_argument("--protocol", choices=("tool_calls", "json_text"), default="tool_calls")
    arguments = parser.parse_args()
    asyncio.run(_main(arguments.steps, arguments.small_context, arguments.protocol))


if __name__ == "__main__":
    main()

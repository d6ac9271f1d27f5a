"""Compression in a whole run (SPEC 9.3, 13): append-only below the threshold, so every
request starts with the whole previous one; above it, one summary plus the last 5
messages, with summaries.jsonl and the full messages.jsonl on disk."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from coding_agent.prompts.context_prompts import SUMMARY_HEADING
from coding_agent.sandbox.replay_model import RecordedRequest, ReplaySandbox

from ._steering import run_cycle
from .conftest import GitHubForge, llm_section, load_for_service, write_config

SUMMARY_MATCH = "Summarise the earlier part"
STEPS = 14


def long_run_script(steps: int) -> dict[str, Any]:
    """`steps` commands with sizeable output, then done; summary requests answered apart."""
    replies: list[dict[str, Any]] = [
        {"tool": "workspace/run", "args": {"command": f"seq 1 {150 + n}"}, "comment": f"Step {n}."} for n in range(steps)
    ]
    replies.append({"done": "Finished the long run."})
    return {
        "conversations": [{"match": SUMMARY_MATCH, "replies": [{"text": "SUMMARY-OF-EARLIER-STEPS: ran seq."}]}],
        "replies": replies,
    }


def main_requests(requests: list[RecordedRequest]) -> list[list[dict[str, Any]]]:
    """The run's own requests (not the summary requests), as their message lists."""
    result = []
    for request in requests:
        messages = request.body["messages"]
        first_user = next(m["content"] for m in messages if m["role"] == "user")
        if SUMMARY_MATCH not in first_user:
            result.append(messages)
    return result


def _jsonl(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def test_long_run_is_append_only_until_the_threshold_then_compressed(github_forge: GitHubForge, tmp_path: Path) -> None:
    github_forge.open_task("issue", "A long investigation", "Run many commands.")
    with ReplaySandbox(long_run_script(STEPS)) as model:
        llm = llm_section(model, "openai", function_calling=False)
        llm["openai"]["context_length"] = 6000
        setup = write_config(tmp_path, [github_forge], llm, memory={"enabled": False}, max_llm_process_num=40)
        report = run_cycle(load_for_service(setup))
        requests = main_requests(model.requests)
        summary_requests = len(model.requests) - len(requests)

    assert [r.status for r in report.results] == ["done"]
    assert summary_requests >= 1, "the run crossed the threshold"
    compressed_at = next(i for i, messages in enumerate(requests) if any(SUMMARY_HEADING in str(m["content"]) for m in messages))
    assert compressed_at >= 2
    for previous, current in zip(requests[: compressed_at - 1], requests[1:compressed_at]):
        assert current[: len(previous)] == previous, "below the threshold each request starts with the previous one"

    before, after = requests[compressed_at - 1], requests[compressed_at]
    assert after[:2] == before[:2], "the system prompt and the task prompt stay"
    assert after[2]["role"] == "user" and after[2]["content"] == f"{SUMMARY_HEADING}\nSUMMARY-OF-EARLIER-STEPS: ran seq."
    assert len(after) == 3 + 5, "the summary and the last 5 messages"
    assert after[3:6] == before[-3:], "the kept messages are the newest ones (3 sent before, 2 since)"
    later = requests[compressed_at + 1]
    assert later[: len(after)] == after, "after a compression the history is append-only again"

    [run_dir] = setup.completed_runs()
    summaries = _jsonl(run_dir / "summaries.jsonl")
    assert len(summaries) == summary_requests and summaries[0]["summary"] == "SUMMARY-OF-EARLIER-STEPS: ran seq."
    history = _jsonl(run_dir / "messages.jsonl")
    current = _jsonl(run_dir / "current.jsonl")
    assert len(history) > len(current), "messages.jsonl keeps the full history"
    commands = [m["content"] for m in history if m["role"] == "assistant" and '"command"' in m["content"]]
    assert len(commands) == STEPS, "every step's reply is in the full history"
    assert SUMMARY_HEADING in current[2]["content"]

"""Hostile model output (SPEC 15, issue 11 item 5): any reply ends cleanly.

A lone surrogate, NUL, invalid UTF-8, a 10 MB reply, wrong types in the JSON or in the
tool arguments: each ends in a correction message (the run goes on) or a failed run with
its label and comment. Never a traceback, never a task left `processing`, never an
unrelated task of the same cycle harmed. The model is the replay server over real HTTP,
the forge the sandbox GitHub, the agent the CLI (`run --once`) or the service.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from coding_agent.sandbox.replay_model import ReplaySandbox

from ._steering import run_cycle
from .conftest import HELLO_SCRIPT, GitHubForge, llm_section, load_for_service, run_cli, write_config

HOSTILE_TITLE = "Hostile reply"
NORMAL_TITLE = "Add a greeting file"
FINISH = {"done": "Finished after the correction."}

# name -> (hostile replies, the outcome they must lead to)
HOSTILE: dict[str, tuple[list[dict[str, Any]], str]] = {
    "lone_surrogate_and_nul": (
        [
            {
                "tool": "workspace/create",
                "args": {"path": "odd.txt", "content": "a\ud800b\x00c"},
                "comment": "Step \ud800 with \x00 NUL.",
            },
            {"done": "Finished \udfff and \x00 done."},
        ],
        "done",
    ),
    "invalid_utf8_body": ([{"raw": b'{"choices": [{"message": {"content": "\xff\xfe"}}]}'}], "failed"),
    "not_a_completion": ([{"raw": '{"choices": 5}'}], "failed"),
    "content_of_wrong_type": (
        [{"raw": '{"id": "x", "choices": [{"index": 0, "message": {"role": "assistant", "content": 5}}]}'}, FINISH],
        "done",
    ),
    "ten_megabytes": ([{"text": "x" * 10_000_000}, FINISH], "done"),
    # nesting deeper than Python's recursion limit, as a tool call in text and as JSON (issue 47)
    "nested_too_deep": (
        [
            {"text": "<tool_call>" + "[" * 50_000},
            {"text": '{"name": "workspace__view", "parameters": ' + "[" * 50_000},
            {"text": '{"comment": ' + "[" * 50_000 + "]" * 50_000 + "}"},
            {"tool": "workspace/list_files", "args": {}},  # a usable step between: under the 5-in-a-row limit
            {"text": '{"command": {"tool": "workspace/view", "args": "' + "[" * 50_000 + '"}}'},
            {"text": "", "tool_calls": [{"name": "workspace__view", "arguments": "[" * 50_000}]},
            FINISH,
        ],
        "done",
    ),
    "tool_args_of_wrong_type": (
        [
            {"text": "", "tool_calls": [{"name": "workspace__create", "arguments": "[1, 2]"}]},
            {"text": "", "tool_calls": [{"name": "workspace__create", "arguments": "5"}]},
            {"tool": "workspace/create", "args": {"path": 5, "content": ["x", None]}},
            FINISH,
        ],
        "done",
    ),
    "json_of_wrong_types": (
        [
            {"text": '{"command": {"tool": 5, "args": []}, "comment": {"a": 1}}'},
            {"text": '{"command": "workspace/create", "comment": 7}'},
            {"text": '{"done": true, "comment": ["a", 1]}'},
        ],
        "done",
    ),
}


# Bodies of the wrong shape from an Ollama server: the run fails naming the server.
OLLAMA_HOSTILE = {
    "invalid_utf8_body": b'{"model": "m", "message": {"role": "assistant", "content": "\xff\xfe"}, "done": true}',
    "content_of_wrong_type": '{"model": "m", "message": {"role": "assistant", "content": 5}, "done": true}',
    "tool_calls_of_wrong_type": '{"model": "m", "message": {"role": "assistant", "content": "", "tool_calls": 7}, "done": true}',
}


def _script(hostile: list[dict[str, Any]]) -> dict[str, Any]:
    return {
        "conversations": [
            {"match": HOSTILE_TITLE, "replies": hostile},
            {"match": NORMAL_TITLE, "replies": HELLO_SCRIPT["replies"]},
        ]
    }


def _assert_clean_end(forge: GitHubForge, number: int, expected: str) -> str:
    labels = forge.labels("issue", number)
    assert "coding agent processing" not in labels, labels
    assert f"coding agent {expected}" in labels, labels
    bodies = [body for _, body in forge.comments("issue", number)]
    assert bodies, "the outcome is commented"
    for body in bodies:
        assert "Traceback" not in body and "\x00" not in body
        body.encode("utf-8")  # no lone surrogate reached the forge
    return bodies[-1]


@pytest.mark.parametrize("function_calling", [True, False], ids=["tool_calls", "json_text"])
@pytest.mark.parametrize("case", sorted(HOSTILE))
def test_hostile_reply_ends_cleanly_and_spares_the_other_task(
    github_forge: GitHubForge, case: str, function_calling: bool, tmp_path: Path
) -> None:
    replies, expected = HOSTILE[case]
    hostile = github_forge.open_task("issue", HOSTILE_TITLE, "Anything.")
    normal = github_forge.open_task("issue", NORMAL_TITLE, "Please add hello.txt.")
    with ReplaySandbox(_script(replies)) as model:
        setup = write_config(
            tmp_path, [github_forge], llm_section(model, "openai", function_calling), memory={"enabled": False}
        )
        report = run_cycle(load_for_service(setup))

    by_key = {result.task_key.rsplit("#", 1)[-1]: result.status for result in report.results}
    assert by_key == {str(hostile): expected, str(normal): "done"}, report
    final = _assert_clean_end(github_forge, hostile, expected)
    _assert_clean_end(github_forge, normal, "done")
    if case == "lone_surrogate_and_nul":
        assert final.startswith("Finished \ufffd and"), final
    if expected == "failed":
        assert "server sent a reply that is not" in final, final


@pytest.mark.parametrize("function_calling", [True, False], ids=["tool_calls", "json_text"])
@pytest.mark.parametrize("provider", ["openai", "ollama"])
def test_run_once_survives_a_lone_surrogate(
    github_forge: GitHubForge, provider: str, function_calling: bool, tmp_path: Path
) -> None:
    number = github_forge.open_task("issue", HOSTILE_TITLE, "Anything.")
    replies, _ = HOSTILE["lone_surrogate_and_nul"]
    with ReplaySandbox(_script(replies)) as model:
        setup = write_config(tmp_path, [github_forge], llm_section(model, provider, function_calling))
        result = run_cli(setup, "run", "--once")

    assert result.returncode == 0, result.stderr
    assert "Traceback" not in result.stderr
    final = _assert_clean_end(github_forge, number, "done")
    assert "\ufffd" in final
    [run_dir] = setup.completed_runs()
    lines = (run_dir / "messages.jsonl").read_text(encoding="utf-8").splitlines()
    assert lines and all("\x00" not in str(json.loads(line)) for line in lines), "no NUL in the stored history"


@pytest.mark.parametrize("case", sorted(OLLAMA_HOSTILE))
def test_hostile_ollama_body_fails_the_run_cleanly(github_forge: GitHubForge, case: str, tmp_path: Path) -> None:
    hostile = github_forge.open_task("issue", HOSTILE_TITLE, "Anything.")
    normal = github_forge.open_task("issue", NORMAL_TITLE, "Please add hello.txt.")
    with ReplaySandbox(_script([{"raw": OLLAMA_HOSTILE[case]}])) as model:
        setup = write_config(tmp_path, [github_forge], llm_section(model, "ollama"), memory={"enabled": False})
        report = run_cycle(load_for_service(setup))

    by_key = {result.task_key.rsplit("#", 1)[-1]: result.status for result in report.results}
    assert by_key == {str(hostile): "failed", str(normal): "done"}, report
    final = _assert_clean_end(github_forge, hostile, "failed")
    assert "ollama server sent a reply that is not a chat response" in final, final

"""Tool calls left in the reply's text (SPEC 5.1, issue 47 items 1 and 2), end to end.

A server without a tool parser (vLLM without `--tool-call-parser`, llama.cpp without
`--jinja`, an Ollama template that does not know the model) passes the model's tool call
through as `content`, with no structured `tool_calls`. The replay model serves each
family's markup exactly so, around the markup of that family's verbatim completion (the
unit tests in tests/unit/test_text_tool_calls.py hold the completions as copied, with
their sources); the agent runs with the built-in workspace server against the sandbox
GitHub. The file must be written and pushed, the run must end done, and no posted text
(comments, PR title and body) may hold tool-call markup.

Under JSON in text, the malformed JSON small models write is repaired before it is
refused, and a reply holding a native tool call is read as that command.
"""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any

import pytest

from coding_agent.llm.text_tool_calls import tool_call_markup
from coding_agent.sandbox.git_http import git_client
from coding_agent.sandbox.replay_model import ReplaySandbox

from ._steering import run_cycle
from .conftest import MAINTAINER, REPO, GitHubForge, llm_section, load_for_service, write_config

CLONE_TOKEN = "t-text-tool-calls-clone"
ARGS = {"path": "hello.txt", "content": "hello\n"}
JSON_ARGS = json.dumps(ARGS)
FINAL = "Wrote hello.txt."

# family -> the first reply's text: the family's markup (as in its verbatim completion,
# source in the unit tests) calling the workspace's `create`, by its encoded, real or bare name.
FAMILIES: dict[str, str] = {
    # vllm test_hermes_tool_parser.py (QwQ-32B: reasoning, </think>, then <tool_call>)
    "hermes": f'<think>The user wants hello.txt.</think>\n\n<tool_call>\n{{"name": "workspace__create", "arguments": {JSON_ARGS}}}\n</tool_call>\n\n ',
    # vllm test_qwen3coder_tool_parser.py (single_tool_with_content)
    "qwen3_coder": "Sure! Let me create it.<tool_call>\n<function=workspace__create>\n<parameter=path>\nhello.txt\n</parameter>\n"
    "<parameter=content>\nhello\n\n</parameter>\n</function>\n</tool_call>",
    # vllm test_mistral_tool_parser.py: pre-v11 list, v11 NAME{json}, v13 NAME[ARGS]{json}
    "mistral_list": f'[TOOL_CALLS][{{"name": "workspace__create", "arguments": {JSON_ARGS}}}]',
    "mistral_v11": f"[TOOL_CALLS]workspace__create{JSON_ARGS}",
    "mistral_args": f"[TOOL_CALLS]workspace__create[ARGS]{JSON_ARGS}",
    # vllm test_llama3_json_tool_parser.py (simple: prose around a bare object)
    "llama3_json": f'Here is the result: {{"name": "workspace__create", "parameters": {JSON_ARGS}}} Would you like to know more?',
    # sglang test_function_call_parser.py (Llama32Detector: <|python_tag|>)
    "llama3_python_tag": f'<|python_tag|>{{"name": "workspace__create", "parameters": {JSON_ARGS}}}<|eom_id|>',
    # vllm test_llama4_pythonic_tool_parser.py (PYTHON_TAG_FUNCTION_OUTPUT)
    "llama4_pythonic": "<|python_start|>[workspace__create(path='hello.txt', content='hello\\n')]<|python_end|>",
    # vllm test_pythonic_tool_parser.py (a bare list of calls)
    "pythonic": "[workspace__create(path='hello.txt', content='hello\\n')]",
    # vllm test_deepseekv3_tool_parser.py (surrounding_text_output)
    "deepseek_v3": "Let me create it.<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>workspace__create\n"
    f"```json\n{JSON_ARGS}\n```<｜tool▁call▁end｜><｜tool▁calls▁end｜>",
    # vllm test_deepseekv31_tool_parser.py (with_tool)
    "deepseek_v31": f"normal text<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>workspace__create<｜tool▁sep｜>{JSON_ARGS}<｜tool▁call▁end｜><｜tool▁calls▁end｜>",
    # OpenAI harmony guide / vllm test_openai_tool_parser.py (analysis, then a commentary call)
    "harmony": "<|channel|>analysis<|message|>Need to use function workspace__create.<|end|><|start|>assistant"
    f"<|channel|>commentary to=functions.workspace__create <|constrain|>json<|message|>{JSON_ARGS}<|call|>",
    # vllm test_glm4_moe_tool_parser.py (tool_call_with_content_before)
    "glm45": "I'll help you with that. <tool_call>workspace__create\n    <arg_key>path</arg_key>\n    <arg_value>hello.txt</arg_value>\n"
    "    <arg_key>content</arg_key>\n    <arg_value>hello\n</arg_value>\n    </tool_call>",
    # vllm test_kimi_k2_tool_parser.py (tool_call_with_content_before)
    "kimi_k2": "I'll help you with that. <|tool_calls_section_begin|> <|tool_call_begin|>\nfunctions.workspace__create:0 "
    f"<|tool_call_argument_begin|> {JSON_ARGS} <|tool_call_end|> <|tool_calls_section_end|>",
    # vllm test_granite_tool_parser.py (single_tool_call_output)
    "granite": f'<|tool_call|> [{{"name": "workspace__create", "arguments": {JSON_ARGS}}}]',
    # vllm test_internlm2_tool_parser.py (surrounding_text_output)
    "internlm2": f'Let me do that. <|action_start|><|plugin|>{{"name": "workspace__create", "parameters": {JSON_ARGS}}}<|action_end|>',
    # vllm test_phi4mini_tool_parser.py (surrounding_text_output)
    "phi4": f'Let me do that.\nfunctools[{{"name": "workspace__create", "arguments": {JSON_ARGS}}}]\nWould you like to know more?',
    # vllm test_xlam_tool_parser.py (single_tool_with_think_tag)
    "xlam": f"<think>I'll help you with that.</think>[{{\"name\": \"workspace__create\", \"arguments\": {JSON_ARGS}}}]",
    # vllm test_cohere_command_tool_parser.py (cmd3-single_tool_call)
    "command_r": "<|START_THINKING|> i will call create<|END_THINKING|><|START_ACTION|>\n[\n"
    f'    {{"tool_call_id": "0", "tool_name": "workspace__create", "parameters": {JSON_ARGS}}}\n]\n<|END_ACTION|>',
}


def _clone_file(forge: GitHubForge, tmp_path: Path, name: str) -> str | None:
    """`name` on the branch of the one PR the run opened, as pushed; None when absent."""
    pulls = forge.sandbox.state.pulls(REPO)
    if not pulls:
        return None
    forge.sandbox.state.add_user(MAINTAINER, token=CLONE_TOKEN)
    destination = tmp_path / "fresh"
    git_client(None, "clone", "--quiet", "--branch", pulls[0].head, f"{forge.url}/{REPO}.git", str(destination), token=CLONE_TOKEN)
    path = destination / name
    return path.read_text() if path.exists() else None


def _posted(forge: GitHubForge, number: int) -> list[str]:
    bodies = [body for _, body in forge.comments("issue", number)]
    bodies += [text for pull in forge.sandbox.state.pulls(REPO) for text in (pull.title, pull.body)]
    return bodies


def _run(
    forge: GitHubForge, tmp_path: Path, replies: list[dict[str, Any]], function_calling: bool = True, provider: str = "openai"
) -> tuple[str, int, ReplaySandbox]:
    number = forge.open_task("issue", "Add a greeting file", "Please add hello.txt.")
    with ReplaySandbox({"replies": replies}) as model:
        setup = write_config(tmp_path, [forge], llm_section(model, provider, function_calling), memory={"enabled": False})
        [result] = run_cycle(load_for_service(setup)).results
    return result.status, number, model


def _assert_nothing_posted_holds_markup(forge: GitHubForge, number: int) -> list[str]:
    posted = _posted(forge, number)
    for text in posted:
        assert tool_call_markup(text) is None, text
        assert "<think" not in text and "<|" not in text and "<｜" not in text, text
    return posted


@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_each_family_written_as_text_is_run(
    github_forge: GitHubForge, family: str, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="coding_agent.llm.protocols")
    status, number, model = _run(github_forge, tmp_path, [{"text": FAMILIES[family]}, {"text": FINAL}])
    notices = [record.getMessage() for record in caplog.records if "come as text" in record.getMessage()]
    assert len(notices) == 1, notices

    assert status == "done"
    assert _clone_file(github_forge, tmp_path, "hello.txt") == "hello\n"
    posted = _assert_nothing_posted_holds_markup(github_forge, number)
    assert any(FINAL in text for text in posted), posted
    assert len(model.requests) == 2
    answered = model.requests[1].body["messages"][-1]
    assert answered["role"] == "user" and answered["content"].startswith("Output of workspace/create"), answered


@pytest.mark.parametrize("family", ["hermes", "mistral_args", "harmony"])
def test_ollama_content_with_text_tool_calls_is_run(github_forge: GitHubForge, family: str, tmp_path: Path) -> None:
    status, number, model = _run(github_forge, tmp_path, [{"text": FAMILIES[family]}, {"text": FINAL}], provider="ollama")

    assert status == "done"
    assert _clone_file(github_forge, tmp_path, "hello.txt") == "hello\n"
    _assert_nothing_posted_holds_markup(github_forge, number)


def test_several_calls_in_one_reply_run_in_order(github_forge: GitHubForge, tmp_path: Path) -> None:
    calls = (
        '<tool_call>\n{"name": "workspace__create", "arguments": {"path": "a.txt", "content": "first\\n"}}\n</tool_call>\n'
        '<tool_call>\n{"name": "workspace/create", "arguments": {"path": "b.txt", "content": "second\\n"}}\n</tool_call>\n'
        '<tool_call>\n{"name": "str_replace", "arguments": {"path": "a.txt", "old_str": "first", "new_str": "one"}}\n</tool_call>'
    )
    status, number, model = _run(github_forge, tmp_path, [{"text": calls}, {"text": FINAL}])

    assert status == "done"
    assert _clone_file(github_forge, tmp_path, "a.txt") == "one\n"  # the replace ran after the create
    assert (tmp_path / "fresh" / "b.txt").read_text() == "second\n"
    _assert_nothing_posted_holds_markup(github_forge, number)
    messages = model.requests[-1].body["messages"]
    assert json.dumps(messages).count("Output of workspace/") == 3
    roles = [message["role"] for message in messages]
    assert all(a != b for a, b in zip(roles[1:], roles[2:])), roles  # templates that insist on alternation (Mistral's) accept it


def test_a_call_inside_think_does_not_run(github_forge: GitHubForge, tmp_path: Path) -> None:
    hidden = f'<think>Maybe <tool_call>{{"name": "workspace__create", "arguments": {{"path": "evil.txt", "content": "x"}}}}</tool_call></think>{FINAL}'
    status, number, model = _run(github_forge, tmp_path, [{"tool": "workspace/create", "args": ARGS}, {"text": hidden}])

    assert status == "done"
    assert _clone_file(github_forge, tmp_path, "evil.txt") is None
    assert (tmp_path / "fresh" / "hello.txt").read_text() == "hello\n"
    posted = _assert_nothing_posted_holds_markup(github_forge, number)
    assert any(text.startswith(FINAL) for text in posted)


@pytest.mark.parametrize(
    ("bad", "named"),
    [
        ('<tool_call>\n{"name": "workspace__delete_everything", "arguments": {}}\n</tool_call>', "workspace__delete_everything"),
        ('<tool_call>\n{"name": "workspace__create", "arguments": {path: hello.txt, content: }\n</tool_call>', "not JSON"),
        ("[TOOL_CALLS]workspace__create[ARGS]{'path': 'hello.txt'", "not JSON"),
    ],
    ids=["unknown_tool", "arguments_not_json", "mistral_arguments_not_json"],
)
def test_unreadable_markup_gets_a_correction_never_a_done(github_forge: GitHubForge, bad: str, named: str, tmp_path: Path) -> None:
    status, number, model = _run(github_forge, tmp_path, [{"text": bad}, {"text": FAMILIES["hermes"]}, {"text": FINAL}])

    assert status == "done"
    assert len(model.requests) == 3
    correction = model.requests[1].body["messages"][-1]
    assert correction["role"] == "user" and named in correction["content"], correction
    assert _clone_file(github_forge, tmp_path, "hello.txt") == "hello\n"
    _assert_nothing_posted_holds_markup(github_forge, number)


def test_a_final_answer_holding_markup_is_corrected_not_posted(github_forge: GitHubForge, tmp_path: Path) -> None:
    leaking = f"{FINAL}\n<|tool_call_begin|>functions.workspace__view:0<|tool_call_argument_begin|>{{\"path\""
    status, number, model = _run(github_forge, tmp_path, [{"tool": "workspace/create", "args": ARGS}, {"done": leaking}, {"text": FINAL}])

    assert status == "done"
    assert len(model.requests) == 3
    _assert_nothing_posted_holds_markup(github_forge, number)


# --- JSON in text -----------------------------------------------------------------------

_COMMAND = "workspace/create"

# Malformed JSON as small models write it (the cases of json_repair's own tests:
# tests/test_json_repair.py in mangiucugna/json_repair), each read without a correction.
MALFORMED: dict[str, str] = {
    "single_quotes": "{'comment': 'Creating it.', 'command': {'tool': 'workspace/create', 'args': {'path': 'hello.txt', 'content': 'hello\\n'}}}",
    "python_literals": '{"comment": "Creating it.", "done": False, "note": None, "command": {"tool": "workspace/create", "args": {"path": "hello.txt", "content": "hello\\n", "overwrite": True}}}',
    "unquoted_keys": '{comment: "Creating it.", command: {tool: "workspace/create", args: {path: "hello.txt", content: "hello\\n"}}}',
    "line_comments": '{\n  // the next step\n  "comment": "Creating it.",\n  "command": {"tool": "workspace/create", "args": {"path": "hello.txt", "content": "hello\\n"}} // create it\n}',
    "trailing_commas": '{"comment": "Creating it.", "command": {"tool": "workspace/create", "args": {"path": "hello.txt", "content": "hello\\n",},},}',
    "missing_last_brace": 'Here it is: {"comment": "Creating it.", "command": {"tool": "workspace/create", "args": {"path": "hello.txt", "content": "hello\\n"}}',
    "native_hermes_instead": f'<tool_call>\n{{"name": "workspace/create", "arguments": {JSON_ARGS}}}\n</tool_call>',
    "native_mistral_instead": f"[TOOL_CALLS]create[ARGS]{JSON_ARGS}",
}
DONE_JSON = '{"done": true, "comment": "Wrote hello.txt."}'


@pytest.mark.parametrize("case", sorted(MALFORMED))
def test_malformed_json_is_repaired_not_corrected(github_forge: GitHubForge, case: str, tmp_path: Path) -> None:
    status, number, model = _run(github_forge, tmp_path, [{"text": MALFORMED[case]}, {"text": DONE_JSON}], function_calling=False)

    assert status == "done"
    assert len(model.requests) == 2
    answered = model.requests[1].body["messages"][-1]["content"]
    assert '"previous_output"' in answered and "could not" not in answered, "read at once: no correction"
    assert _clone_file(github_forge, tmp_path, "hello.txt") == "hello\n"
    _assert_nothing_posted_holds_markup(github_forge, number)


def test_hopeless_json_is_corrected_and_five_in_a_row_fail_the_run(github_forge: GitHubForge, tmp_path: Path) -> None:
    hopeless = {"text": "I think I should create the file now, then say so."}
    status, number, model = _run(github_forge, tmp_path, [hopeless] * 6, function_calling=False)

    assert status == "failed"
    assert "coding agent failed" in github_forge.labels("issue", number)
    corrections = [request.body["messages"][-1]["content"] for request in model.requests[1:]]
    assert corrections and all("no JSON object" in text for text in corrections), corrections
    _assert_nothing_posted_holds_markup(github_forge, number)

"""`doctor` probes the model (SPEC 5.1): one small round trip offering one harmless tool,
and the model's context window where the server reports it. The replay model answers as
each kind of server does (tests/support/model_server.py): structured tool calls, a tool
call left in the text, a refusal of tools, an answer without a call; and a window
smaller than `context_length` (Ollama `/api/show`, vLLM `/v1/models`, LM Studio
`/api/v0/models`)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.support.model_server import REFUSALS, QuirkyReplay, ServerQuirks

from .conftest import HELLO_SCRIPT, SECRETS, GitHubForge, run_cli, write_config

PROBE = "llm tool calling"
# A Hermes/Qwen tool call as a server without a tool parser leaves it in `content` (the
# shape of vLLM's hermes parser tests, tests/tool_use/test_hermes_tool_parser.py).
HERMES_TEXT = '<tool_call>\n{"name": "doctor__echo", "arguments": {"text": "ping"}}\n</tool_call>'


def _doctor(tmp_path: Path, forge: GitHubForge, model: QuirkyReplay, provider: str, **section: Any) -> dict[str, str]:
    """doctor's lines by check name, for a config on `model` (printed for the README)."""
    if provider == "ollama":
        llm_section: dict[str, Any] = {"endpoint": model.url, "model": "replay", **section}
    else:
        llm_section = {"base_url": model.openai_base_url, "model": "replay", "api_key": "${E2E_LLM_KEY}", **section}
    setup = write_config(tmp_path, [forge], {"provider": provider, provider: llm_section})
    result = run_cli(setup, "doctor")
    print(result.stdout)
    for secret in SECRETS:
        assert secret not in result.stdout + result.stderr
    lines = {}
    for line in result.stdout.splitlines():
        status, _, rest = line.partition("  ")
        lines[rest.strip().split(": ", 1)[0]] = f"{status.strip()} {rest.strip()}"
    return lines


def _llm_line(lines: dict[str, str]) -> str:
    [line] = [line for name, line in lines.items() if name.startswith("llm ") and name != PROBE]
    return line


def test_structured_tool_calls_a_working_setup(github_forge: GitHubForge, tmp_path: Path) -> None:
    script = {"model": "replay", "replies": [{"tool": "doctor/echo", "args": {"text": "ping"}}]}
    with QuirkyReplay(script, ServerQuirks(context_window=32768)) as model:
        lines = _doctor(tmp_path, github_forge, model, "openai")
        [probe] = model.requests
    assert [tool["function"]["name"] for tool in probe.body["tools"]] == ["doctor__echo"], "one harmless tool"
    assert lines[PROBE].startswith("ok ") and "structured tool calls (doctor/echo)" in lines[PROBE]
    assert "auto or true works" in lines[PROBE]
    assert "context window 32768 reported by the server, used" in _llm_line(lines)


def test_a_tool_call_left_in_the_text_names_its_format(github_forge: GitHubForge, tmp_path: Path) -> None:
    with QuirkyReplay({"model": "replay", "replies": [{"text": HERMES_TEXT}]}) as model:
        lines = _doctor(tmp_path, github_forge, model, "openai")
    assert lines[PROBE].startswith("ok ") and "as text (hermes format)" in lines[PROBE]
    assert "--tool-call-parser hermes" in lines[PROBE]


@pytest.mark.parametrize(("server", "provider"), [("vllm", "openai"), ("ollama", "ollama"), ("lmstudio", "lmstudio")])
def test_a_server_that_refuses_tools(github_forge: GitHubForge, server: str, provider: str, tmp_path: Path) -> None:
    refusal = REFUSALS[server]
    with QuirkyReplay({"model": "replay", "replies": [{"done": "never asked"}]}, ServerQuirks(refuse_tools=refusal)) as model:
        lines = _doctor(tmp_path, github_forge, model, provider)
    assert lines[PROBE].startswith("ok "), "auto (the default) goes on in JSON text by itself"
    assert "the server refuses tools" in lines[PROBE] and refusal.words[:60] in lines[PROBE]
    assert "use llm.function_calling: auto" in lines[PROBE]
    assert not model.requests, "the refused request is the only one"


def test_true_with_a_refusing_server_fails_the_probe(github_forge: GitHubForge, tmp_path: Path) -> None:
    with QuirkyReplay({"model": "replay", "replies": []}, ServerQuirks(refuse_tools=REFUSALS["vllm"])) as model:
        section = {"base_url": model.openai_base_url, "model": "replay", "api_key": "${E2E_LLM_KEY}"}
        setup = write_config(tmp_path, [github_forge], {"provider": "openai", "function_calling": True, "openai": section})
        result = run_cli(setup, "doctor")
    [line] = [line for line in result.stdout.splitlines() if PROBE in line]
    assert result.returncode == 1 and line.startswith("FAIL") and "you have true" in line


def test_an_answer_without_a_call_asks_for_json_in_text(github_forge: GitHubForge, tmp_path: Path) -> None:
    with QuirkyReplay({"model": "replay", "replies": [{"text": "pong"}]}) as model:
        lines = _doctor(tmp_path, github_forge, model, "openai")
    assert lines[PROBE].startswith("FAIL") and "answered without calling the tool ('pong')" in lines[PROBE]
    assert "use llm.function_calling: false" in lines[PROBE]


@pytest.mark.parametrize("provider", ["ollama", "openai", "lmstudio"])
def test_a_context_window_below_context_length(github_forge: GitHubForge, provider: str, tmp_path: Path) -> None:
    script = {"model": "replay", "replies": [{"tool": "doctor/echo", "args": {"text": "ping"}}]}
    with QuirkyReplay(script, ServerQuirks(context_window=4096)) as model:
        lines = _doctor(tmp_path, github_forge, model, provider, context_length=8192)
    line = _llm_line(lines)
    assert line.startswith("FAIL") and "the model supports 4096" in line
    assert f"lower llm.{provider}.context_length to 4096 or leave it unset" in line


def test_an_unset_context_length_uses_the_window_the_server_reports(github_forge: GitHubForge, tmp_path: Path) -> None:
    """Runs, not only doctor: with no context_length, Ollama's num_ctx is the window the
    server reports (asked once, logged), as is the compression threshold's base."""
    number = github_forge.open_task("issue", "Add a greeting file", "Please add hello.txt with a greeting.")
    with QuirkyReplay(HELLO_SCRIPT, ServerQuirks(context_window=6000)) as model:
        llm = {"provider": "ollama", "ollama": {"endpoint": model.url, "model": "replay"}}
        setup = write_config(tmp_path, [github_forge], llm)
        result = run_cli(setup, "run", "--once")
        requests = model.requests
    assert result.returncode == 0, result.stderr
    assert "coding agent done" in github_forge.labels("issue", number)
    chats = [request for request in requests if request.path == "/api/chat"]
    assert chats and all(request.body["options"]["num_ctx"] == 6000 for request in chats)
    log = "".join(path.read_text() for path in setup.logs.glob("*.log*"))
    assert "context window of replay is 6000 (reported by the server" in log

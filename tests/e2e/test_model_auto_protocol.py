"""`llm.function_calling: auto` (SPEC 5.1): native tool calls until the server refuses
them, then JSON in text for that model for the rest of the process, with one log line in
the server's words. The replay model answers as each server does when it cannot take
`tools` (the verbatim texts and where they come from: tests/support/model_server.py).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from coding_agent.llm.tool_support import forget_refusals
from tests.support.model_server import REFUSALS, QuirkyReplay, ServerQuirks

from ._forge_git import branch_file, task_branch
from ._planning import marker_of, markers, planning_config, tool_names
from ._steering import pause_signal_action, run_cycle, steering_config, three_files_script
from .conftest import HELLO_SCRIPT, GitHubForge, llm_section, load_for_service, run_cli, write_config
from .test_model_prefix import assert_each_request_extends_the_last
from .test_planning_run import THREE_ACTIONS

_LOGGED = "refused native tool calls"


def _log_lines(setup_logs: Path) -> list[str]:
    return [line for path in setup_logs.glob("*.log*") for line in path.read_text(errors="replace").splitlines()]


@pytest.mark.parametrize(
    ("server", "provider"),
    [
        ("vllm", "openai"),
        ("llama.cpp", "openai"),
        ("ollama", "ollama"),
        ("ollama-v1", "openai"),
        ("lmstudio", "lmstudio"),
    ],
)
def test_auto_goes_on_in_json_text_when_the_server_refuses_tools(
    github_forge: GitHubForge, server: str, provider: str, tmp_path: Path
) -> None:
    refusal = REFUSALS[server]
    first = github_forge.open_task("issue", "Add a greeting file", "Please add hello.txt with a greeting.")
    second = github_forge.open_task("issue", "Greet again", "Please add hello.txt, the same greeting.")
    quirks = ServerQuirks(refuse_tools=refusal)
    with QuirkyReplay(HELLO_SCRIPT, quirks) as model:
        setup = write_config(tmp_path, [github_forge], llm_section(model, provider, function_calling="auto"))  # type: ignore[arg-type]
        result = run_cli(setup, "run", "--once")
        answered = model.requests

    assert result.returncode == 0, result.stderr
    for number in (first, second):
        assert "coding agent done" in github_forge.labels("issue", number)
        assert branch_file(github_forge, task_branch(github_forge, number), "hello.txt") == "hello from the agent\n"
    # One request offered tools: the first run's first; the same run asked again in JSON
    # text, and the second run of the same process never offered them.
    assert len(quirks.refused) == 1
    assert answered and not any(request.body.get("tools") for request in answered)
    conversations = {request.conversation for request in answered}
    assert len(conversations) == 2
    for conversation in conversations:  # after the fallback, each request extends the last
        assert_each_request_extends_the_last([r for r in answered if r.conversation == conversation], at_least=2)
    system = answered[0].body["messages"][0]["content"]
    assert '"command"' in system, "the system prompt asks for JSON in text after the fallback"
    logged = [line for line in _log_lines(setup.logs) if _LOGGED in line]
    assert len(logged) == 1, logged
    assert refusal.words in logged[0]
    for run_dir in setup.completed_runs():
        assert json.loads((run_dir / "metadata.json").read_text())["protocol"] == "json_text"


def test_true_keeps_its_meaning_the_refusal_fails_the_run_in_the_servers_words(
    github_forge: GitHubForge, tmp_path: Path
) -> None:
    refusal = REFUSALS["vllm"]
    number = github_forge.open_task("issue", "Add a greeting file", "Please add hello.txt with a greeting.")
    quirks = ServerQuirks(refuse_tools=refusal)
    with QuirkyReplay(HELLO_SCRIPT, quirks) as model:
        setup = write_config(tmp_path, [github_forge], llm_section(model, "openai", function_calling=True))  # type: ignore[arg-type]
        run_cli(setup, "run", "--once")
        answered = model.requests

    assert len(quirks.refused) == 1 and not answered, "no fallback: one request, refused"
    assert "coding agent failed" in github_forge.labels("issue", number)
    comments = [body for _, body in github_forge.comments("issue", number)]
    assert any(refusal.words in body and "llm.function_calling: auto" in body for body in comments), comments


def test_a_planned_run_falls_back_to_json_text_with_its_phase_request_in_json_form(
    github_forge: GitHubForge, tmp_path: Path
) -> None:
    """Planning mode (SPEC 10.2): the first phase request, sent for native phase tools,
    is taken back and sent again in its JSON-text form; the plan runs to the end."""
    forget_refusals()
    number = github_forge.open_task("issue", "Three files", "Please write a, b and c.")
    quirks = ServerQuirks(refuse_tools=REFUSALS["llama.cpp"])
    with QuirkyReplay({"phases": THREE_ACTIONS}, quirks) as model:
        setup = planning_config(tmp_path, [github_forge], model, "auto", reflection={"trigger_interval": 2})  # type: ignore[arg-type]
        report = run_cycle(load_for_service(setup))
        answered = model.requests

    assert [result.status for result in report.results] == ["done"]
    assert "coding agent done" in github_forge.labels("issue", number)
    [refused] = quirks.refused
    assert marker_of(refused) == "[Phase: planning]" and "submit_plan" in tool_names(refused)
    assert not any(request.body.get("tools") for request in answered)
    first = answered[0].body["messages"]
    phase_requests = [m for m in first if m["role"] == "user" and str(m["content"]).startswith("[Phase: ")]
    assert len(phase_requests) == 1, "the native phase request was taken back, not left beside the JSON one"
    assert '"phase":"planning"' in phase_requests[0]["content"].replace(" ", "")
    assert "submit_plan" not in phase_requests[0]["content"]
    assert markers(answered)[-1] == "[Phase: completion]"
    for path in ("a.txt", "b.txt", "c.txt"):
        assert branch_file(github_forge, task_branch(github_forge, number), path) == f"{path}\n"


def test_a_run_that_fell_back_resumes_in_json_text_in_a_new_process(github_forge: GitHubForge, tmp_path: Path) -> None:
    """Paused between a JSON reply and its action, then resumed by another process (which
    has not seen the refusal): the saved reply is read as JSON text, not as a final answer,
    and no request offers tools again."""
    forget_refusals()
    number = github_forge.open_task("issue", "Three files", "Please write a, b and c.")
    quirks = ServerQuirks(refuse_tools=REFUSALS["ollama-v1"])
    with QuirkyReplay(three_files_script(1, "pause"), quirks, actions={"pause": pause_signal_action(tmp_path)}) as model:
        setup = steering_config(tmp_path, [github_forge], model, function_calling="auto")  # type: ignore[arg-type]
        first = run_cycle(load_for_service(setup))
        assert [result.status for result in first.results] == ["paused"]
        resumed = run_cli(setup, "resume")
        answered = model.requests

    assert resumed.returncode == 0, resumed.stderr
    assert len(quirks.refused) == 1
    assert not any(request.body.get("tools") for request in answered)
    assert "coding agent done" in github_forge.labels("issue", number)
    branch = task_branch(github_forge, number)
    assert [branch_file(github_forge, branch, name) for name in ("a.txt", "b.txt", "c.txt")] == ["a\n", "b\n", "c\n"]
    assert github_forge.comments("issue", number)[-1][1].startswith("Wrote three files.")

"""The loop with every provider and protocol, and the ways a run can fail or be refused.

These run the service in-process (the same code the CLI calls) against the sandbox
forge and the replay model over real HTTP, with the real workspace MCP server.
"""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import pytest

from coding_agent.runtime.service import AgentService, CycleReport
from coding_agent.sandbox.faults import Fault
from coding_agent.sandbox.replay_model import ReplaySandbox

from ._forge_git import branch_file, task_branch
from .conftest import (
    HELLO_SCRIPT,
    READER,
    GitHubForge,
    llm_section,
    load_for_service,
    progress_comments,
    write_config,
)


def _run_cycle(setup_config: object) -> CycleReport:
    async def once() -> CycleReport:
        service = AgentService(setup_config)  # type: ignore[arg-type]
        try:
            return await service.run_cycle()
        finally:
            await service.aclose()

    return asyncio.run(once())


@pytest.mark.parametrize("provider", ["openai", "lmstudio", "ollama"])
@pytest.mark.parametrize("function_calling", [True, False], ids=["tool_calls", "json_text"])
def test_every_provider_and_protocol_drives_the_loop(
    github_forge: GitHubForge, provider: str, function_calling: bool, tmp_path: Path
) -> None:
    number = github_forge.open_task("issue", "Add a greeting file", "Please add hello.txt.")
    with ReplaySandbox(HELLO_SCRIPT) as model:
        setup = write_config(tmp_path, [github_forge], llm_section(model, provider, function_calling))
        report = _run_cycle(load_for_service(setup))
        requests = model.requests

    assert [r.status for r in report.results] == ["done"]
    assert "coding agent done" in github_forge.labels("issue", number)
    [run_dir] = setup.completed_runs()
    assert branch_file(github_forge, task_branch(github_forge, number), "hello.txt") == "hello from the agent\n"
    assert len(requests) == 3, "two turns, then the memory request (memory.enabled is on by default)"
    assert "update your notes about the repository acme/widgets" in requests[2].body["messages"][-1]["content"]
    expected_path = "/api/chat" if provider == "ollama" else "/v1/chat/completions"
    assert {r.path for r in requests} == {expected_path}
    offered_tools = requests[0].body.get("tools")
    assert bool(offered_tools) is function_calling, "native tools are offered only in the tool-calling protocol"
    if provider == "ollama":
        assert requests[0].body["options"]["num_ctx"] == 8192
    if not function_calling:
        assert "previous_output" in requests[1].body["messages"][-1]["content"]


def test_five_unusable_replies_fail_the_run(github_forge: GitHubForge, tmp_path: Path) -> None:
    number = github_forge.open_task("issue", "Confuse the model", "Anything.")
    script = {"replies": [{"text": f"I am not JSON, attempt {n}"} for n in range(1, 7)]}
    with ReplaySandbox(script) as model:
        setup = write_config(tmp_path, [github_forge], llm_section(model, "openai", function_calling=False))
        report = _run_cycle(load_for_service(setup))
        requests = model.requests

    assert [r.status for r in report.results] == ["failed"]
    assert len(requests) == 5, "the fifth unusable reply ends the run"
    labels = github_forge.labels("issue", number)
    assert "coding agent failed" in labels and "coding agent done" not in labels
    assert "coding agent processing" not in labels
    final = github_forge.comments("issue", number)[-1][1]
    assert "5 replies in a row without usable JSON" in final
    assert "Traceback" not in final


def test_forge_503_twice_then_ok_still_ends_done(github_forge: GitHubForge, replay: ReplaySandbox, tmp_path: Path) -> None:
    number = github_forge.open_task("issue", "Flaky forge", "Please add hello.txt.")
    github_forge.sandbox.faults.add(Fault(pattern=r"^POST /repos/acme/widgets/issues/\d+/comments$", count=2, status=503))
    setup = write_config(tmp_path, [github_forge], llm_section(replay))

    report = _run_cycle(load_for_service(setup))

    assert [r.status for r in report.results] == ["done"]
    assert github_forge.sandbox.faults.injected == 2
    bodies = [body for _, body in github_forge.comments("issue", number)]
    [progress] = progress_comments(bodies)
    assert "Writing hello.txt now." in progress, "a retried comment is posted once, with the step in it"
    assert "coding agent done" in github_forge.labels("issue", number)


def test_429_with_retry_after_is_waited_out(github_forge: GitHubForge, replay: ReplaySandbox, tmp_path: Path) -> None:
    number = github_forge.open_task("issue", "Rate limited", "Please add hello.txt.")
    github_forge.sandbox.faults.add(Fault(pattern=r"^GET /search/issues$", count=1, status=429, retry_after=1))
    setup = write_config(tmp_path, [github_forge], llm_section(replay))  # backoff base 0.01 s

    started = time.monotonic()
    report = _run_cycle(load_for_service(setup))
    elapsed = time.monotonic() - started

    assert github_forge.sandbox.faults.injected == 1
    assert [r.status for r in report.results] == ["done"]
    assert "coding agent done" in github_forge.labels("issue", number)
    assert elapsed >= 1.0, "the retry waited for Retry-After, not for the 0.01 s backoff"


def test_label_from_reader_is_refused_once_without_a_model_call(
    github_forge: GitHubForge, replay: ReplaySandbox, tmp_path: Path
) -> None:
    number = github_forge.open_task("issue", "Drive-by request", "Do something.", labelled_by=READER)
    setup = write_config(tmp_path, [github_forge], llm_section(replay))

    first = _run_cycle(load_for_service(setup))
    second = _run_cycle(load_for_service(setup))

    assert first.errors == () and second.errors == (), (first, second)
    assert replay.requests == [], "no model call for an untrusted trigger"
    comments = github_forge.comments("issue", number)
    assert len(comments) == 1, "exactly one explanatory comment, even after a second poll"
    assert f"@{READER}" in comments[0][1] and "write access" in comments[0][1]
    labels = github_forge.labels("issue", number)
    assert "coding agent processing" not in labels and "coding agent done" not in labels


def test_step_limit_ends_the_run_failed_with_a_notice(github_forge: GitHubForge, tmp_path: Path) -> None:
    number = github_forge.open_task("issue", "Endless", "Keep listing.")
    script = {"replies": [{"tool": "workspace/list_files", "args": {"path": "."}, "comment": ""}] * 5}
    with ReplaySandbox(script) as model:
        setup = write_config(tmp_path, [github_forge], llm_section(model), max_llm_process_num=3)
        report = _run_cycle(load_for_service(setup))
        assert len(model.requests) == 3

    assert [r.status for r in report.results] == ["failed"]
    assert "step limit (3 model turns)" in github_forge.comments("issue", number)[-1][1]
    assert "coding agent failed" in github_forge.labels("issue", number)

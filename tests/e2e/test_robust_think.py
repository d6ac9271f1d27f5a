"""`<think>` blocks are never posted (SPEC 15, issue 11 item 12), in either protocol.

The model reasons in `<think>...</think>` (or an unclosed `<thinking>` when cut off) in
its step comments, in the `done` comment and inside tool arguments. None of it may reach
the forge: not a comment, not the PR title or body, not a commit message, not a file
pushed to the branch. The agent runs with the replay model against the sandbox GitHub
and GitLab, whose repositories are real git over HTTP; the checks read the forge back.
"""

from __future__ import annotations

import asyncio
import subprocess
from pathlib import Path

import pytest

from coding_agent.runtime.service import AgentService, CycleReport
from coding_agent.sandbox.git_http import git_client
from coding_agent.sandbox.replay_model import ReplaySandbox

from .conftest import MAINTAINER, REPO, ForgeUnderTest, GitHubForge, llm_section, load_for_service, write_config

SECRET = "SECRET-THOUGHT"
CLONE_TOKEN = "t-robust-think-clone"
SCRIPT = {
    "replies": [
        {
            "tool": "workspace/create",
            "args": {"path": "hello.txt", "content": f"<think>{SECRET}-args</think>hello\n"},
            "comment": f"<think>{SECRET}-step</think>Creating hello.txt.",
        },
        {
            "tool": "workspace/view",
            "args": {"path": "hello.txt"},
            "comment": f"Checking it. <thinking>{SECRET}-unclosed and the reply was cut",
        },
        {"done": f"<think>{SECRET}-done</think>Wrote hello.txt.\n<thinking>{SECRET}-cut off"},
    ]
}


def _run_cycle(config: object) -> CycleReport:
    async def once() -> CycleReport:
        service = AgentService(config)  # type: ignore[arg-type]
        try:
            return await service.run_cycle()
        finally:
            await service.aclose()

    return asyncio.run(once())


def _posted_change(forge: ForgeUnderTest) -> tuple[str, str, str]:
    """(title, body, head branch) of the one PR/MR the run opened."""
    if isinstance(forge, GitHubForge):
        [pull] = forge.sandbox.state.pulls(REPO)
        return pull.title, pull.body, pull.head
    [mr] = forge.sandbox.state.require_project(REPO).merge_requests.values()  # type: ignore[attr-defined]
    return mr.title, mr.description, mr.source_branch


def _clone(forge: ForgeUnderTest, branch: str, destination: Path) -> Path:
    if isinstance(forge, GitHubForge):
        forge.sandbox.state.add_user(MAINTAINER, token=CLONE_TOKEN)
    else:
        forge.sandbox.state.add_token(MAINTAINER, CLONE_TOKEN)  # type: ignore[attr-defined]
    git_client(None, "clone", "--quiet", "--branch", branch, f"{forge.url}/{REPO}.git", str(destination), token=CLONE_TOKEN)
    return destination


@pytest.mark.parametrize("function_calling", [True, False], ids=["tool_calls", "json_text"])
def test_no_think_block_reaches_the_forge(forge: ForgeUnderTest, function_calling: bool, tmp_path: Path) -> None:
    number = forge.open_task("issue", "Add a greeting file", "Please add hello.txt.")
    with ReplaySandbox(SCRIPT) as model:
        setup = write_config(tmp_path, [forge], llm_section(model, "openai", function_calling))
        [result] = _run_cycle(load_for_service(setup)).results

    assert result.status == "done"
    bodies = [body for _, body in forge.comments("issue", number)]
    assert bodies[-1].startswith("Wrote hello.txt."), bodies[-1]
    assert any("Creating hello.txt." in body for body in bodies) and any("Checking it." in body for body in bodies)
    title, body, branch = _posted_change(forge)
    clone = _clone(forge, branch, tmp_path / "fresh")
    assert (clone / "hello.txt").read_text() == "hello\n"
    log = subprocess.run(["git", "-C", str(clone), "log", "--format=%B"], capture_output=True, text=True, check=True)
    posted = [*bodies, title, body, log.stdout, (clone / "hello.txt").read_text()]
    for text in posted:
        assert SECRET not in text and "<think" not in text.lower(), text

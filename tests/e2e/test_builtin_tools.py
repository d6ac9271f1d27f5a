"""SPEC 6: the built-in workspace server is always started beside the configured servers.

An operator who adds one server of their own (a team's tool, the npm filesystem server)
must not lose `workspace/*`: before, the model was offered only the configured server,
a planned `workspace/create` failed as an unknown tool and the run ended done with no
change. Only `tools.builtin_workspace: false` leaves the built-in server out.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from coding_agent.sandbox.replay_model import RecordedRequest, ReplaySandbox

from ._forge_git import branch_file, task_branch
from .conftest import HELLO_SCRIPT, GitHubForge, llm_section, run_cli, write_config

# A small stdio MCP server of the tests' own (tools echo, slow, big, fail, ...).
EXTRA_SERVER: dict[str, Any] = {
    "mcp_server_name": "extra",
    "command": ["{python}", str(Path(__file__).parents[1] / "integration" / "slow_mcp_server.py")],
}


def _offered(request: RecordedRequest, function_calling: bool) -> str:
    """Every tool name the model was offered, as one text: the native tool list, or the
    system prompt that lists the tools for JSON replies."""
    if function_calling:
        return " ".join(tool["function"]["name"] for tool in request.body.get("tools") or [])
    return " ".join(str(m.get("content")) for m in request.body["messages"] if m.get("role") == "system")


@pytest.mark.parametrize("function_calling", [True, False], ids=["tool_calls", "json_text"])
def test_a_configured_server_keeps_the_built_in_tools(
    github_forge: GitHubForge, tmp_path: Path, function_calling: bool
) -> None:
    number = github_forge.open_task("issue", "Add a greeting", "Please add hello.txt.")
    with ReplaySandbox(HELLO_SCRIPT) as model:
        setup = write_config(
            tmp_path, [github_forge], llm_section(model, function_calling=function_calling), mcp_servers=[EXTRA_SERVER]
        )
        result = run_cli(setup, "run", "--once")
        first_request = model.requests[0]

    assert result.returncode == 0, result.stderr
    offered = _offered(first_request, function_calling)
    separator = "__" if function_calling else "/"
    assert f"workspace{separator}create" in offered and f"extra{separator}echo" in offered, offered
    assert "coding agent done" in github_forge.labels("issue", number)
    assert branch_file(github_forge, task_branch(github_forge, number), "hello.txt") == "hello from the agent\n"


def test_builtin_workspace_false_leaves_the_built_in_server_out(github_forge: GitHubForge, tmp_path: Path) -> None:
    number = github_forge.open_task("issue", "Just answer", "What tools do you have?")
    with ReplaySandbox({"replies": [{"done": "I have the extra tools only."}]}) as model:
        setup = write_config(
            tmp_path, [github_forge], llm_section(model), mcp_servers=[EXTRA_SERVER], tools={"builtin_workspace": False}
        )
        result = run_cli(setup, "run", "--once")
        first_request = model.requests[0]

    assert result.returncode == 0, result.stderr
    offered = _offered(first_request, function_calling=True)
    assert "extra__echo" in offered and "workspace__" not in offered, offered
    assert "coding agent done" in github_forge.labels("issue", number)

"""The built-in workspace server inside the agent process (issue 13 item 4; SPEC 6, 15).

The hub runs this installation's built-in server on memory streams instead of starting
an interpreter per run. These tests go through the real `ToolHub` with the documented
config entries and check that the server really is in this process, and that it gives
the model no reach the process server did not: `run` and git get no variable of this
process's environment beyond the allow-list (this process holds the agent's tokens),
and the file tools still refuse paths outside the root.
"""

from __future__ import annotations

import os
import secrets
import sys
from pathlib import Path

import pytest

from coding_agent.config import MCPServerConfig, ToolsConfig
from coding_agent.errors import ToolError
from coding_agent.tools.hub import ToolHub

from .test_tool_hub import _processes_mentioning

COMMANDS = {
    "python -m": [sys.executable, "-m", "coding_agent.tools.workspace_server", "--root", "{workspace}"],
    "coding-agent mcp-workspace": ["coding-agent", "mcp-workspace", "--root", "{workspace}"],
}


def builtin(command: list[str], **overrides: object) -> MCPServerConfig:
    return MCPServerConfig.model_validate({"mcp_server_name": "workspace", "command": command, **overrides})


@pytest.fixture
def workspace(tmp_path: Path) -> Path:
    root = (tmp_path / "workspace").resolve()
    root.mkdir()
    (root / "readme.md").write_text("# demo\n")
    return root


@pytest.mark.parametrize("form", sorted(COMMANDS))
async def test_both_documented_commands_run_the_server_in_this_process(workspace: Path, form: str) -> None:
    async with ToolHub([builtin(COMMANDS[form])], ToolsConfig(), workspace) as hub:
        assert hub.server_pids() == {}
        assert _processes_mentioning(str(workspace)) == []  # no interpreter was started for it
        view = await hub.call("workspace/view", {"path": "readme.md"})
        created = await hub.call("workspace/create", {"path": "notes/a.txt", "content": "a\n"})
        status = await hub.call("workspace/git_status", {})
    assert (view.text, view.is_error) == ("     1\t# demo", False)
    assert not created.is_error and (workspace / "notes" / "a.txt").read_text() == "a\n"
    assert status.is_error and "not a git repository" in status.text


@pytest.mark.parametrize("sandbox", ["bwrap", "none"])
async def test_run_gets_nothing_of_the_agent_processs_environment(
    workspace: Path, monkeypatch: pytest.MonkeyPatch, sandbox: str
) -> None:
    token = "ghp_" + secrets.token_hex(12)
    monkeypatch.setenv("GITHUB_TOKEN", token)
    monkeypatch.setenv("UNLISTED_SETTING", "unlisted-" + secrets.token_hex(6))
    monkeypatch.setenv("TZ", f"UTC-{token}")  # an allow-listed name holding a secret is dropped too
    command = [*COMMANDS["python -m"], "--sandbox", sandbox]
    server = builtin(command, env={"LEAKY_HEADER": f"Bearer {token}"})
    async with ToolHub([server], ToolsConfig(), workspace, secrets=[token]) as hub:
        result = await hub.call("workspace/run", {"command": "env > env.txt"})
    assert not result.is_error, result.text
    assert ("sandbox without network" if sandbox == "bwrap" else "unsandboxed") in result.text
    printed = (workspace / "env.txt").read_text()
    assert "PATH=" in printed  # the environment really was written
    assert token not in printed
    for name in ("GITHUB_TOKEN", "UNLISTED_SETTING", "LEAKY_HEADER", "TZ"):
        assert f"{name}=" not in printed


async def test_the_file_tools_refuse_paths_outside_the_root(workspace: Path, tmp_path: Path) -> None:
    outside = (tmp_path / "outside").resolve()
    outside.mkdir()
    hidden = "OUTSIDE-" + secrets.token_hex(8)
    (outside / "secret.txt").write_text(hidden + "\n")
    (workspace / "link").symlink_to(outside)
    async with ToolHub([builtin(COMMANDS["python -m"])], ToolsConfig(), workspace) as hub:
        results = [
            await hub.call("workspace/view", {"path": "../outside/secret.txt"}),
            await hub.call("workspace/view", {"path": str(outside / "secret.txt")}),
            await hub.call("workspace/view", {"path": "link/secret.txt"}),
            await hub.call("workspace/search", {"pattern": "OUTSIDE", "path": "link"}),
            await hub.call("workspace/create", {"path": "link/planted.txt", "content": "x"}),
            await hub.call("workspace/create", {"path": "../planted.txt", "content": "x"}),
        ]
    assert [r.is_error for r in results] == [True] * len(results), [r.text for r in results]
    assert all(hidden not in r.text for r in results)
    assert sorted(p.name for p in outside.iterdir()) == ["secret.txt"]
    assert not (tmp_path / "planted.txt").exists()


async def test_a_bad_command_line_is_a_startup_error_naming_it(workspace: Path) -> None:
    missing = str(workspace / "missing")
    command = [sys.executable, "-m", "coding_agent.tools.workspace_server", "--root", missing]
    with pytest.raises(ToolError, match=r"'workspace'.*could not be started.*is not a directory"):
        async with ToolHub([builtin(command)], ToolsConfig(), workspace):
            pass


async def test_a_relative_root_is_the_workspace_as_for_a_process(workspace: Path) -> None:
    command = [sys.executable, "-m", "coding_agent.tools.workspace_server", "--root", "."]
    async with ToolHub([builtin(command)], ToolsConfig(), workspace) as hub:
        view = await hub.call("workspace/view", {"path": "readme.md"})
        ran = await hub.call("workspace/run", {"command": "pwd"})
    assert (view.text, view.is_error) == ("     1\t# demo", False)
    assert str(workspace) in ran.text.splitlines()
    assert os.getcwd() != str(workspace)

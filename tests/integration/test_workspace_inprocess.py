"""The built-in workspace server inside the agent process (SPEC 6, 15).

The hub runs the built-in server the config adds (`BuiltinWorkspaceServerConfig`) on
memory streams instead of starting an interpreter per run; an operator's own entry runs
as the command it names, even when that command starts the same server. These tests go
through the real `ToolHub` and check where the server runs, and that in this process it
gives the model no reach the process server did not: `run` and git get no variable of
this process's environment beyond the allow-list (this process holds the agent's
tokens), and the file tools still refuse paths outside the root.
"""

from __future__ import annotations

import secrets
from pathlib import Path

import pytest
from mcp.server.fastmcp import FastMCP
from mcp.shared.memory import create_connected_server_and_client_session
from mcp.types import TextContent

from coding_agent.config import ToolsConfig, builtin_workspace_server, parse_config
from coding_agent.tools import workspace_server
from coding_agent.tools.hub import ToolHub
from coding_agent.tools.workspace_server import create_server

from .test_tool_hub import _processes_mentioning

COMMANDS = {
    "python -m": ["{python}", "-m", "coding_agent.tools.workspace_server", "--root", "{workspace}"],
    "coding-agent mcp-workspace": ["coding-agent", "mcp-workspace", "--root", "{workspace}"],
}
MINIMAL = {
    "task_source": "github",
    "github": {"token": "t", "owner": "acme"},
    "llm": {"provider": "openai", "openai": {"model": "m", "api_key": "k"}},
}


@pytest.fixture
def workspace(tmp_path: Path) -> Path:
    root = (tmp_path / "workspace").resolve()
    root.mkdir()
    (root / "readme.md").write_text("# demo\n")
    return root


async def test_the_built_in_server_the_config_adds_runs_in_this_process(workspace: Path) -> None:
    config = parse_config(MINIMAL, env={})
    async with ToolHub(config.mcp_servers, config.tools, workspace) as hub:
        assert hub.server_pids() == {}
        assert _processes_mentioning(str(workspace)) == []  # no interpreter was started for it
        view = await hub.call("workspace/view", {"path": "readme.md"})
        created = await hub.call("workspace/create", {"path": "notes/a.txt", "content": "a\n"})
        status = await hub.call("workspace/git_status", {})
    assert (view.text, view.is_error) == ("     1\t# demo", False)
    assert not created.is_error and (workspace / "notes" / "a.txt").read_text() == "a\n"
    assert status.is_error and "not a git repository" in status.text


@pytest.mark.parametrize("form", sorted(COMMANDS))
async def test_an_operators_own_workspace_entry_runs_as_the_command_it_names(workspace: Path, form: str) -> None:
    data = {**MINIMAL, "mcp_servers": [{"mcp_server_name": "workspace", "command": COMMANDS[form]}]}
    config = parse_config(data, env={})
    async with ToolHub(config.mcp_servers, config.tools, workspace) as hub:
        pids = hub.server_pids()
        assert list(pids) == ["workspace"] and pids["workspace"] is not None
        view = await hub.call("workspace/view", {"path": "readme.md"})
    assert (view.text, view.is_error) == ("     1\t# demo", False)


@pytest.mark.parametrize("sandbox", ["bwrap", "none"])
async def test_run_gets_nothing_of_the_agent_processs_environment(
    workspace: Path, monkeypatch: pytest.MonkeyPatch, sandbox: str
) -> None:
    token = "ghp_" + secrets.token_hex(12)
    monkeypatch.setenv("GITHUB_TOKEN", token)
    monkeypatch.setenv("UNLISTED_SETTING", "unlisted-" + secrets.token_hex(6))
    monkeypatch.setenv("TZ", f"UTC-{token}")  # an allow-listed name holding a secret is dropped too
    server = builtin_workspace_server(sandbox).model_copy(update={"env": {"LEAKY_HEADER": f"Bearer {token}"}})
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
    async with ToolHub([builtin_workspace_server()], ToolsConfig(), workspace) as hub:
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


# -- the tools built once per process (create_server's templates) ---------------------


@pytest.fixture
def cold_templates(monkeypatch: pytest.MonkeyPatch) -> dict[object, object]:
    """An empty template cache: the next `create_server` builds every tool as FastMCP does."""
    templates: dict[object, object] = {}
    monkeypatch.setattr(workspace_server, "_TOOL_TEMPLATES", templates)
    return templates


async def _tools_list(server: FastMCP) -> str:
    """tools/list as the client receives it, as JSON."""
    async with create_connected_server_and_client_session(server) as session:
        listed = await session.list_tools()
    return listed.model_dump_json(by_alias=True, exclude_none=True)


async def test_servers_built_from_the_templates_list_the_tools_of_the_first_build(
    cold_templates: dict[object, object], tmp_path: Path, workspace: Path
) -> None:
    other = (tmp_path / "other").resolve()
    other.mkdir()
    first = await _tools_list(create_server(workspace))
    built = dict(cold_templates)
    second = await _tools_list(create_server(workspace))
    third = await _tools_list(create_server(other, "none"))
    assert len(built) == 9  # one template per tool: no two tools share a key
    assert cold_templates == built and all(cold_templates[key] is built[key] for key in built)  # reused
    assert second == first and third == first
    assert '"name":"str_replace"' in first and '"old_str"' in first  # names and schemas really are in it


async def test_servers_built_from_the_templates_work_in_their_own_root(
    cold_templates: dict[object, object], tmp_path: Path
) -> None:
    roots = [(tmp_path / name).resolve() for name in ("first", "second")]
    servers = []
    for root in roots:
        root.mkdir()
        servers.append(create_server(root, "none"))
    assert len(cold_templates) == 9  # the second server came from the first one's templates
    for root, server in zip(roots, servers, strict=True):
        async with create_connected_server_and_client_session(server) as session:
            created = await session.call_tool("create", {"path": "notes.txt", "content": f"{root.name}\n"})
            viewed = await session.call_tool("view", {"path": "notes.txt"})
            ran = await session.call_tool("run", {"command": "pwd"})
        assert not created.isError and not ran.isError
        texts = [item.text for result in (viewed, ran) for item in result.content if isinstance(item, TextContent)]
        assert texts[0] == f"     1\t{root.name}"
        assert str(root) in texts[1].splitlines()
    assert [(root / "notes.txt").read_text() for root in roots] == ["first\n", "second\n"]

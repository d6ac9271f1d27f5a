"""The shipped config.example.yaml starts its MCP servers without `coding-agent` on PATH,
as from cron or with a venv that is not activated (issue 14)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from coding_agent.config import ToolsConfig, load_config
from coding_agent.tools.hub import ToolHub

EXAMPLE = Path(__file__).resolve().parents[2] / "config.example.yaml"
ENV = {"GITHUB_TOKEN": "t0ken-for-the-example", "OPENAI_API_KEY": "k3y-for-the-example"}


def test_example_starts_the_workspace_server_with_this_interpreter() -> None:
    config = load_config(EXAMPLE, env=ENV)
    [workspace] = [server for server in config.mcp_servers if server.mcp_server_name == "workspace"]
    assert workspace.command[0] == sys.executable


def test_a_coding_agent_command_runs_this_installation_not_the_path() -> None:
    config = load_config(EXAMPLE, env=ENV)
    legacy = config.mcp_servers[0].model_validate(
        {"mcp_server_name": "w", "command": ["coding-agent", "mcp-workspace", "--root", "{workspace}"]}
    )
    assert legacy.command[:3] == [sys.executable, "-m", "coding_agent.cli"]


async def test_example_servers_list_tools_with_a_cron_path(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PATH", "/usr/bin:/bin")  # cron's PATH: no venv, no ~/.local/bin
    config = load_config(EXAMPLE, env=ENV)
    async with ToolHub(config.mcp_servers, ToolsConfig(), tmp_path) as hub:
        names = [spec.name for spec in hub.tool_specs]
    assert "workspace/view" in names and "workspace/run" in names

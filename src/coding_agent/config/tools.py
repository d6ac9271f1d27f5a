"""The MCP sections: `mcp_servers` (the operator's servers; the built-in workspace server joins them
unless `tools.builtin_workspace` is false) and `tools`.
"""

from __future__ import annotations

import sys
from typing import Literal

from pydantic import Field, field_validator

from coding_agent.config.base import _Strict
from coding_agent.prompts.prompting import text

__all__ = [
    "BUILTIN_SERVER_NAME",
    "BuiltinWorkspaceServerConfig",
    "MCPServerConfig",
    "WORKSPACE_SYSTEM_PROMPT",
    "WorkspaceServerConfig",
    "builtin_workspace_server",
    "operators_workspace_server",
    "ToolsConfig",
]


class MCPServerConfig(_Strict):
    """One MCP server (seed 003 section 3.2). `{workspace}` in command or env is the run's workspace."""

    mcp_server_name: str = Field(pattern=r"^[A-Za-z0-9_.-]+$")
    command: list[str] = Field(min_length=1)
    env: dict[str, str] = Field(default_factory=dict)
    system_prompt: str = ""
    tools_allow: list[str] | None = None

    @field_validator("command")
    @classmethod
    def _this_interpreter(cls, command: list[str]) -> list[str]:
        """`{python}` is this interpreter, and `coding-agent ...` runs this installation's CLI
        through it: neither is looked up on PATH, so the config works from cron or a venv
        that is not activated."""
        command = [sys.executable if item == "{python}" else item for item in command]
        if command[0] == "coding-agent":
            command = [sys.executable, "-m", "coding_agent.cli", *command[1:]]
        return command


WORKSPACE_SYSTEM_PROMPT = text("workspace_server.j2")
BUILTIN_SERVER_NAME = "workspace"
WORKSPACE_SERVER_MODULE = "coding_agent.tools.workspace_server"
SandboxMode = Literal["bwrap", "none"]


class WorkspaceServerConfig(MCPServerConfig):
    """The built-in workspace server, whichever way it starts: the entry the config adds
    (`BuiltinWorkspaceServerConfig`) or an operator's own entry named `workspace`.

    Being this type is what makes a server the workspace server: its `run` is sandboxed as
    `sandbox` says (`security.sandbox`, whatever `--sandbox` an operator's command gives)
    and reaches the egress proxy. No command line is read to decide it.
    """

    sandbox: SandboxMode = "bwrap"


class BuiltinWorkspaceServerConfig(WorkspaceServerConfig):
    """The built-in workspace server as the config itself adds it (`tools.builtin_workspace`).

    This type is the hub's one reason to run a server inside the agent process (one
    server per run on memory streams, no interpreter start per run): it is made only in
    code, never read from a config file, so an operator's own entry always runs as the
    command it names. `command` is the same server as a process (what `doctor` and the
    logs name), with the same `sandbox`.
    """


def builtin_workspace_server(sandbox: SandboxMode = "bwrap") -> BuiltinWorkspaceServerConfig:
    """The built-in workspace server of a run, its `run` sandboxed as `sandbox` says.

    Its process form runs with this interpreter, so it works whether or not `coding-agent`
    is on PATH.
    """
    return BuiltinWorkspaceServerConfig(
        mcp_server_name=BUILTIN_SERVER_NAME,
        command=[sys.executable, "-m", WORKSPACE_SERVER_MODULE, "--root", "{workspace}", "--sandbox", sandbox],
        system_prompt=WORKSPACE_SYSTEM_PROMPT,
        sandbox=sandbox,
    )


def operators_workspace_server(entry: MCPServerConfig, sandbox: SandboxMode) -> WorkspaceServerConfig:
    """An operator's entry named `workspace`: the built-in server started their way, as
    the process its command names, with `--sandbox` as the operator chose once
    (`security.sandbox`), so that no entry runs the model's commands less sandboxed."""
    kept: list[str] = []
    skip = False
    for part in entry.command:
        if skip:
            skip = False
            continue
        if part == "--sandbox":
            skip = True
            continue
        if part.startswith("--sandbox="):
            continue
        kept.append(part)
    fields = {**entry.model_dump(), "command": [*kept, "--sandbox", sandbox], "sandbox": sandbox}
    return WorkspaceServerConfig.model_validate(fields)


class ToolsConfig(_Strict):
    builtin_workspace: bool = Field(
        default=True,
        description="start the built-in workspace server beside the configured mcp_servers; false leaves it out",
    )
    call_timeout_seconds: float = Field(default=120, gt=0)
    startup_timeout_seconds: float = Field(default=60, gt=0)
    max_output_chars: int = Field(default=20000, gt=0)

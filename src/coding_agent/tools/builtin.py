"""The built-in workspace MCP server as a config entry: the default of `mcp_servers`.

Kept apart from the server itself so that loading a config does not import the MCP
server stack.
"""

from __future__ import annotations

import sys
from typing import Any

__all__ = ["WORKSPACE_SYSTEM_PROMPT", "builtin_workspace_server", "with_sandbox_mode"]

WORKSPACE_SYSTEM_PROMPT = """\
The workspace tools work on the repository checked out for this task; paths are relative
to its root (absolute paths inside it work too, nothing outside it does).
- Look before you edit: `list_files` and `search` to find code, `view` to read a file
  with line numbers (use `view_range` for long files).
- Edit with `str_replace` (old_str must match the file exactly, whitespace included, and
  occur once; add surrounding lines to make it unique), `insert` to add lines after a
  line number, `create` for new files (it overwrites an existing file).
- `run` executes a shell command in the root (no network, so nothing can be downloaded;
  output is capped, long commands time out). Use it to build and run the tests.
- `git_status` and `git_diff` show what you changed; git commands inside `run` do not see
  the repository's history. Do not commit or push: the agent commits and opens the pull
  request when you are done.
"""


def builtin_workspace_server() -> dict[str, Any]:
    """The `mcp_servers` entry that starts the built-in workspace server for a run.

    It runs with this interpreter, so it works whether or not `coding-agent` is on PATH.
    """
    return {
        "mcp_server_name": "workspace",
        "command": [sys.executable, "-m", "coding_agent.tools.workspace_server", "--root", "{workspace}"],
        "system_prompt": WORKSPACE_SYSTEM_PROMPT,
    }


_WORKSPACE_SERVER_MARKERS = ("coding_agent.tools.workspace_server", "mcp-workspace")


def with_sandbox_mode(command: list[str], mode: str) -> list[str]:
    """`command` with `--sandbox MODE` when it starts the built-in workspace server, else as is.

    The operator chooses the mode once (`security.sandbox`); every entry that runs the
    built-in server gets it, whatever the entry itself says.
    """
    if not any(marker in part for part in command for marker in _WORKSPACE_SERVER_MARKERS):
        return command
    result: list[str] = []
    skip = False
    for part in command:
        if skip:
            skip = False
            continue
        if part == "--sandbox":
            skip = True
            continue
        if part.startswith("--sandbox="):
            continue
        result.append(part)
    return [*result, "--sandbox", mode]

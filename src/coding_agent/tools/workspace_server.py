"""The built-in workspace MCP server (SPEC 6): files, search, shell and git in one root.

It ships with the package and is started like any other MCP server:
`python -m coding_agent.tools.workspace_server --root DIR` (or `coding-agent
mcp-workspace --root DIR`). The file tools (`workspace_files`) confine every access to
the root with descriptor-relative opens; every shell command runs through
`sandbox.run_command` (bwrap, SPEC 15; unsandboxed only with `--sandbox none`, which
the operator chooses with `security.sandbox: none`).

`git_status` and `git_diff` are answered here, on the host side, not in the sandbox: the
repository's git directory is outside the workspace (`host_git.git_dir_for`), where the
sandbox cannot see or change it, and git runs with the host-written configuration of
`host_git` (no hooks, filters, fsmonitor or config from the work tree).

Tool failures are raised as exceptions: FastMCP turns them into results with `isError`
set, so the model reads the message and the server keeps serving. Every text that
leaves a tool is passed through `escape_text`, so a file name that is not UTF-8 is shown
escaped instead of breaking the JSON of the answer. Blocking file work runs in a worker
thread so that one large search does not stall other requests.
"""

from __future__ import annotations

import argparse
import asyncio
import functools
import os
import signal
from collections.abc import Awaitable, Callable, Hashable, Mapping, Sequence
from pathlib import Path
from typing import Any, ParamSpec

import anyio.to_thread
from mcp.server.fastmcp import FastMCP
from mcp.server.fastmcp.tools import Tool

from coding_agent.config import WORKSPACE_SYSTEM_PROMPT
from coding_agent.tools.egress_sandbox import EgressSandbox
from coding_agent.tools.host_git import git_dir_for, hardened_git_environment
from coding_agent.tools.paths import escape_text
from coding_agent.tools.sandbox import CommandResult, SandboxMode, SandboxUnavailable, run_command, scrubbed_environment
from coding_agent.tools.workspace_files import Workspace, WorkspaceError

__all__ = [
    "WORKSPACE_SYSTEM_PROMPT",
    "Workspace",
    "WorkspaceError",
    "create_server",
    "main",
    "parse_arguments",
]

RUN_MAX_TIMEOUT_SECONDS = 3600
GIT_TIMEOUT_SECONDS = 60
GIT_MAX_OUTPUT_BYTES = 4_000_000
_P = ParamSpec("_P")
_ToolFunction = Callable[..., Awaitable[str]]


def _format_command(command: str, result: CommandResult) -> str:
    where = "sandbox without network" if result.sandboxed else "unsandboxed"
    output = result.output if result.output else "(no output)"
    return f"$ {command}\n{output.rstrip()}\n[exit code {result.exit_code}; {where}; {result.duration_seconds:.1f}s]"


class _Git:
    """Read-only git queries on the host side, with the git directory outside the workspace."""

    def __init__(self, root: Path, git_dir: Path | None = None, source_env: Mapping[str, str] | None = None) -> None:
        self._root = root
        self._git_dir = git_dir or git_dir_for(root)
        env = hardened_git_environment(scrubbed_environment(source=source_env), work_tree=root)
        env["GIT_DIR"] = str(self._git_dir)
        self._env = {**env, "LC_ALL": "C", "LANGUAGE": ""}

    async def _git(self, *args: str) -> tuple[int, str]:
        """(exit code, stdout and stderr) of `git args`; output beyond the cap is cut."""
        process = await asyncio.create_subprocess_exec(
            "git", "--no-pager", *args,
            cwd=self._root,
            env=self._env,
            stdin=asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.STDOUT,
            start_new_session=True,
        )  # fmt: skip
        assert process.stdout is not None
        try:
            data = await asyncio.wait_for(_read_capped(process.stdout, GIT_MAX_OUTPUT_BYTES), GIT_TIMEOUT_SECONDS)
        except TimeoutError:
            _kill_group(process.pid)
            await process.wait()
            raise WorkspaceError(f"git {args[0]} timed out after {GIT_TIMEOUT_SECONDS}s") from None
        if len(data) >= GIT_MAX_OUTPUT_BYTES:
            _kill_group(process.pid)
            data += b"\n[... output cut]"
        code = await process.wait()
        return code, data.decode("utf-8", errors="replace")

    async def _require_repository(self) -> None:
        if not (self._git_dir / "HEAD").is_file():
            raise WorkspaceError("the workspace is not a git repository, so there is no git status or diff")

    async def _checked(self, *args: str) -> str:
        code, output = await self._git(*args)
        if code != 0:
            raise WorkspaceError(f"git {args[0]} failed (exit code {code}): {output.strip()}")
        return output

    async def status(self) -> str:
        await self._require_repository()
        return (await self._checked("status", "--short", "--branch")).rstrip() or "nothing to report"

    async def diff(self) -> str:
        await self._require_repository()
        diff_options = ("--no-ext-diff", "--no-textconv", "--no-color")
        has_head = (await self._git("rev-parse", "--verify", "--quiet", "HEAD"))[0] == 0
        if has_head:
            changes = await self._checked("diff", *diff_options, "HEAD")
        else:
            changes = await self._checked("diff", *diff_options, "--cached") + await self._checked(
                "diff", *diff_options
            )
        untracked = [name for name in (await self._checked("ls-files", "--others", "--exclude-standard")).split("\n") if name]
        parts = [changes.rstrip()] if changes.strip() else []
        if untracked:
            header = "Untracked files (new, not in the diff above; use view to read them):"
            parts.append(header + "\n" + "\n".join(untracked))
        return "\n\n".join(parts) if parts else "no changes"


async def _read_capped(stream: asyncio.StreamReader, limit: int) -> bytes:
    data = bytearray()
    while len(data) < limit and (chunk := await stream.read(min(65536, limit - len(data)))):
        data += chunk
    return bytes(data)


def _kill_group(pid: int) -> None:
    try:
        os.killpg(pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


def _escaped(tool: Callable[_P, Awaitable[str]]) -> Callable[_P, Awaitable[str]]:
    """The tool's text and error messages with non-UTF-8 names escaped; any failure a tool error."""

    @functools.wraps(tool)
    async def wrapper(*args: _P.args, **kwargs: _P.kwargs) -> str:
        try:
            return escape_text(await tool(*args, **kwargs))
        except WorkspaceError as error:
            raise WorkspaceError(escape_text(str(error))) from None
        except (SandboxUnavailable, UnicodeError, OSError) as error:
            raise WorkspaceError(escape_text(f"{error.__class__.__name__}: {error}")) from None

    return wrapper


# The tools of `create_server` as FastMCP built them on first use, by `_template_key`.
# Filled from worker threads too: `setdefault` keeps the first of two concurrent builds
# (they are equal), so every server of the process shares one.
_TOOL_TEMPLATES: dict[Hashable, Tool] = {}


def _template_key(fn: Callable[..., Any], structured_output: bool) -> Hashable:
    """What `Tool.from_function` reads from `fn`, short of the values its closure holds.

    The code and defaults of every layer (the tool under `_escaped`, and the wrapper,
    whose code all tools share): one tool's code is one signature and docstring, so two
    different tools never share a key, and a default that came from a closure value
    (which the schema would show) would give a key of its own.
    """
    layers: list[Hashable] = []
    layer: Any = fn
    while layer is not None:
        kwdefaults = tuple(sorted((layer.__kwdefaults__ or {}).items()))
        layers.append((layer.__code__, layer.__defaults__, kwdefaults))
        layer = getattr(layer, "__wrapped__", None)
    return (tuple(layers), structured_output)


def _tool_for_run(fn: _ToolFunction, *, structured_output: bool) -> Tool:
    """`fn` as a FastMCP tool; its argument model and JSON schema built once per process.

    `Tool.from_function` builds a pydantic model from the signature and its JSON schema:
    most of `create_server`'s CPU, paid by every run before its first model request.
    What it builds depends on the function's code, not on the root or sandbox the
    closure holds, so a run gets a copy of the first build with its own function
    (`Tool.run` calls `self.fn` through the shared argument model).
    """
    key = _template_key(fn, structured_output)
    template = _TOOL_TEMPLATES.get(key)
    if template is None:
        template = _TOOL_TEMPLATES.setdefault(key, Tool.from_function(fn, structured_output=structured_output))
    return template.model_copy(update={"fn": fn})


def create_server(
    root: Path,
    sandbox: SandboxMode = "bwrap",
    git_dir: Path | None = None,
    egress: EgressSandbox | None = None,
    source_env: Mapping[str, str] | None = None,
) -> FastMCP:
    """Build the FastMCP server for `root`. Separate from `main` so that it can be embedded.

    `egress`: `run` commands reach the host's egress proxy (SPEC 7.1); git never does.
    `source_env`: where the allow-listed variables of `run` and git come from; default
    this process's environment (right for the stdio server, whose environment the hub
    scrubbed). The in-process server passes the hub's scrubbed environment instead,
    because this process is the agent's and holds its tokens.
    """
    workspace = Workspace(root)
    git = _Git(workspace.root, git_dir, source_env)
    # In this order: the order tools/list shows. Each is a closure of this run.
    functions = [*_file_tools(workspace), _run_tool(workspace, sandbox, egress, source_env), *_git_tools(git)]
    tools = [_tool_for_run(_escaped(fn), structured_output=False) for fn in functions]
    return FastMCP("workspace", instructions=WORKSPACE_SYSTEM_PROMPT, log_level="WARNING", tools=tools)


def _file_tools(workspace: Workspace) -> list[_ToolFunction]:
    """The tools that read and edit the workspace's files."""

    async def view(path: str, view_range: list[int] | None = None) -> str:
        """Show a file with line numbers, or list a directory two levels deep.

        path: relative to the workspace root. view_range: [first_line, last_line], 1-based
        and inclusive; last_line -1 means the end of the file. Files longer than 2000
        lines are shown in part; use view_range for the rest.
        """
        return await anyio.to_thread.run_sync(workspace.view, path, view_range)

    async def create(path: str, content: str) -> str:
        """Write a file with the given content, creating parent directories.

        An existing file is overwritten (prefer str_replace to change part of a file).
        """
        return await anyio.to_thread.run_sync(workspace.create, path, content)

    async def str_replace(path: str, old_str: str, new_str: str) -> str:
        """Replace the text old_str with new_str in a file.

        old_str must match exactly (whitespace and indentation included) and occur exactly
        once; add surrounding lines to make it unique. Returns the edited region.
        """
        return await anyio.to_thread.run_sync(workspace.str_replace, path, old_str, new_str)

    async def insert(path: str, insert_line: int, text: str) -> str:
        """Insert text after line insert_line of a file (0 inserts at the top)."""
        return await anyio.to_thread.run_sync(workspace.insert, path, insert_line, text)

    async def list_files(path: str = ".") -> str:
        """List the files under a directory recursively (skips .git; at most 1000 shown)."""
        return await anyio.to_thread.run_sync(workspace.list_files, path)

    async def search(pattern: str, path: str = ".", regex: bool = False, ignore_case: bool = False) -> str:
        """Search file contents for a plain string (or a Python regex with regex=true).

        Prints `file:line: text` for each matching line, at most 200; binary files and .git
        are skipped.
        """
        return await anyio.to_thread.run_sync(workspace.search, pattern, path, regex, ignore_case)

    return [view, create, str_replace, insert, list_files, search]


def _run_tool(
    workspace: Workspace, sandbox: SandboxMode, egress: EgressSandbox | None, source_env: Mapping[str, str] | None
) -> _ToolFunction:
    """The tool that runs a shell command in the workspace, sandboxed."""

    async def run(command: str, timeout_seconds: float = 60) -> str:
        """Run a shell command in the workspace root and return its output and exit code.

        There is no network access. stdout and stderr are combined and capped (the start
        and the end are kept). The command and everything it started are killed after
        timeout_seconds (at most 3600).
        """
        if not command.strip():
            raise WorkspaceError("command is empty")
        if not 0 < timeout_seconds <= RUN_MAX_TIMEOUT_SECONDS:
            raise WorkspaceError(f"timeout_seconds must be between 0 and {RUN_MAX_TIMEOUT_SECONDS}")
        result = await run_command(
            command, workspace.root, timeout_seconds, sandbox, source_env=source_env, egress=egress
        )
        if result.timed_out:
            output = result.output.rstrip() or "(no output)"
            raise WorkspaceError(
                f"command timed out after {timeout_seconds:g}s and was killed with everything it started. "
                f"Output so far:\n{output}"
            )
        text = _format_command(command, result)
        if egress is not None and result.sandboxed:  # SPEC 7.1: only the listed hosts, via the proxy
            text = text.replace("; sandbox without network;", "; sandbox, network only through the egress proxy;")
        return text

    return run


def _git_tools(git: _Git) -> list[_ToolFunction]:
    """The tools that show the workspace's git state."""

    async def git_status() -> str:
        """Show the branch and the changed and untracked files (git status --short --branch)."""
        return await git.status()

    async def git_diff() -> str:
        """Show every change against HEAD (staged and unstaged) and list untracked files."""
        return await git.diff()

    return [git_status, git_diff]


def parse_arguments(argv: Sequence[str] | None = None) -> argparse.Namespace:
    """The server's options as a process: `root`, `sandbox`, `git_dir`."""
    parser = argparse.ArgumentParser(
        prog="coding-agent mcp-workspace",
        description="The built-in workspace MCP server (stdio).",
    )
    parser.add_argument("--root", required=True, help="the workspace directory every path is confined to")
    parser.add_argument(
        "--sandbox",
        choices=("bwrap", "none"),
        default="bwrap",
        help="bwrap (default): commands run in bubblewrap, and fail where it cannot run; none: unsandboxed",
    )
    parser.add_argument("--git-dir", help="the repository's git directory (default: <parent>.git-dirs/<name>)")
    options = parser.parse_args(argv)
    if not Path(options.root).is_dir():
        parser.error(f"--root {options.root!r} is not a directory")
    options.root = Path(options.root)
    options.git_dir = Path(options.git_dir) if options.git_dir else None
    return options


def main(argv: list[str] | None = None) -> None:
    """Serve the workspace over stdio until the client closes stdin."""
    options = parse_arguments(argv)
    create_server(options.root, options.sandbox, options.git_dir, EgressSandbox.from_environment()).run("stdio")


if __name__ == "__main__":
    main()

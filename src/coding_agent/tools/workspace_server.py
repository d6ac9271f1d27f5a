"""The built-in workspace MCP server (SPEC 6): files, search, shell and git in one root.

It ships with the package and is started like any other MCP server:
`python -m coding_agent.tools.workspace_server --root DIR` (or `coding-agent
mcp-workspace --root DIR`). Every path is confined to the root (see `paths`), every
shell command runs through `sandbox.run_command` (bwrap without network when it works,
else a plain subprocess; scrubbed environment either way).

Tool failures are raised as exceptions: FastMCP turns them into results with `isError`
set, so the model reads the message and the server keeps serving. Blocking file work runs
in a worker thread so that one large search does not stall other requests.
"""

from __future__ import annotations

import argparse
import os
import re
import shlex
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import ClassVar

import anyio.to_thread
from mcp.server.fastmcp import FastMCP

from coding_agent.config import WORKSPACE_SYSTEM_PROMPT
from coding_agent.tools.paths import PathOutsideWorkspace, is_inside, relative_display, resolve_in_root
from coding_agent.tools.egress_sandbox import EgressSandbox
from coding_agent.tools.sandbox import CommandResult, SandboxMode, run_command

__all__ = ["WORKSPACE_SYSTEM_PROMPT", "Workspace", "WorkspaceError", "create_server", "main"]

VIEW_MAX_LINES = 2000
LINE_MAX_CHARS = 2000
DIRECTORY_MAX_ENTRIES = 500
LIST_MAX_FILES = 1000
SEARCH_MAX_MATCHES = 200
SEARCH_MAX_FILE_BYTES = 2_000_000
SEARCH_LINE_MAX_CHARS = 300
SNIPPET_CONTEXT_LINES = 3
RUN_MAX_TIMEOUT_SECONDS = 3600
GIT_TIMEOUT_SECONDS = 60
_SKIPPED_DIRECTORIES = frozenset({".git", ".hg", ".svn"})
_BINARY_PROBE_BYTES = 8192


class WorkspaceError(ValueError):
    """A tool could not do what was asked; the message tells the model what to do instead."""


def _number_lines(lines: Sequence[str], first: int) -> str:
    """`cat -n` style: the model quotes line numbers back in `insert` and `view_range`."""
    out = []
    for number, line in enumerate(lines, start=first):
        if len(line) > LINE_MAX_CHARS:
            line = line[:LINE_MAX_CHARS] + f" [... {len(line) - LINE_MAX_CHARS} characters of this line cut]"
        out.append(f"{number:6}\t{line}")
    return "\n".join(out)


def _is_binary(data: bytes) -> bool:
    return b"\x00" in data[:_BINARY_PROBE_BYTES]


class Workspace:
    """The file operations of the server, on one resolved root. Methods raise `WorkspaceError`."""

    def __init__(self, root: Path) -> None:
        self.root = root.resolve()

    # -- paths -----------------------------------------------------------------------
    def resolve(self, path: str) -> Path:
        try:
            return resolve_in_root(self.root, path)
        except PathOutsideWorkspace as error:
            raise WorkspaceError(str(error)) from None

    def show(self, path: Path) -> str:
        return relative_display(path, self.root)

    def _writable(self, path: str) -> Path:
        """Resolve a path to write; `.git` is off limits so the model cannot plant hooks or config."""
        resolved = self.resolve(path)
        if resolved == self.root:
            raise WorkspaceError("the workspace root is a directory; give a file path")
        if ".git" in resolved.relative_to(self.root).parts:
            raise WorkspaceError(f"{self.show(resolved)} is inside .git; the git metadata cannot be edited")
        if resolved.is_dir():
            raise WorkspaceError(f"{self.show(resolved)} is a directory, not a file")
        return resolved

    def _existing_file(self, path: str) -> Path:
        resolved = self._writable(path)
        if not resolved.exists():
            raise WorkspaceError(f"{self.show(resolved)} does not exist; use create to make a new file")
        return resolved

    @staticmethod
    def _read_text(path: Path) -> str:
        data = path.read_bytes()
        if _is_binary(data):
            raise WorkspaceError(f"{path.name} is a binary file ({len(data)} bytes); it cannot be handled as text")
        return data.decode("utf-8", errors="replace")

    @staticmethod
    def _write_text(path: Path, text: str) -> None:
        # newline="" keeps the file's own line endings (CRLF stays CRLF).
        with path.open("w", encoding="utf-8", newline="") as handle:
            handle.write(text)

    def _walk_files(self, start: Path) -> Iterator[Path]:
        """Files under `start`, sorted, skipping VCS metadata and never following directory links."""
        if start.is_file():
            yield start
            return
        for directory, subdirectories, files in os.walk(start):
            subdirectories[:] = sorted(name for name in subdirectories if name not in _SKIPPED_DIRECTORIES)
            for name in sorted(files):
                yield Path(directory) / name

    def _snippet(self, text: str, first_line: int, last_line: int) -> str:
        lines = text.splitlines()
        start = max(1, first_line - SNIPPET_CONTEXT_LINES)
        end = min(len(lines), last_line + SNIPPET_CONTEXT_LINES)
        return _number_lines(lines[start - 1 : end], start)

    # -- tools -----------------------------------------------------------------------
    def view(self, path: str, view_range: list[int] | None = None) -> str:
        resolved = self.resolve(path)
        if not resolved.exists():
            raise WorkspaceError(f"{path!r} does not exist; use list_files to see what is there")
        if resolved.is_dir():
            if view_range is not None:
                raise WorkspaceError("view_range only applies to files, and this path is a directory")
            return self._directory_listing(resolved)
        lines = self._read_text(resolved).splitlines()
        if view_range is None:
            if len(lines) <= VIEW_MAX_LINES:
                return _number_lines(lines, 1) if lines else f"{self.show(resolved)} is empty"
            shown = _number_lines(lines[:VIEW_MAX_LINES], 1)
            return (
                f"{shown}\n[{self.show(resolved)} has {len(lines)} lines; lines 1-{VIEW_MAX_LINES} shown. "
                "Use view_range to see the rest.]"
            )
        if len(view_range) != 2:
            raise WorkspaceError("view_range must be [first_line, last_line] (last_line -1 means the end)")
        first, last = view_range
        if last == -1:
            last = len(lines)
        if first < 1 or first > max(len(lines), 1):
            raise WorkspaceError(f"view_range starts at {first}, but {self.show(resolved)} has {len(lines)} lines")
        if last < first:
            raise WorkspaceError(f"view_range [{first}, {last}] ends before it starts")
        last = min(last, len(lines))
        return _number_lines(lines[first - 1 : last], first)

    def _directory_listing(self, directory: Path) -> str:
        """Two levels deep: enough to orient, short enough to read."""
        entries: list[str] = []
        total = 0
        for child in sorted(directory.iterdir()):
            if child.name in _SKIPPED_DIRECTORIES:
                continue
            total += 1
            is_dir = child.is_dir() and not child.is_symlink()
            entries.append(self.show(child) + ("/" if is_dir else ""))
            if is_dir:
                try:
                    grandchildren = sorted(child.iterdir())
                except OSError:
                    continue
                for grandchild in grandchildren:
                    if grandchild.name in _SKIPPED_DIRECTORIES:
                        continue
                    total += 1
                    entries.append(self.show(grandchild) + ("/" if grandchild.is_dir() else ""))
        if not entries:
            return f"{self.show(directory)} is an empty directory"
        shown = entries[:DIRECTORY_MAX_ENTRIES]
        text = "\n".join(shown)
        if total > len(shown):
            text += f"\n[... {total - len(shown)} more entries; use list_files on a subdirectory]"
        return text

    def create(self, path: str, content: str) -> str:
        resolved = self._writable(path)
        existed = resolved.exists()
        resolved.parent.mkdir(parents=True, exist_ok=True)
        self._write_text(resolved, content)
        verb = "Overwrote" if existed else "Created"
        return f"{verb} {self.show(resolved)} ({len(content.splitlines())} lines)"

    def str_replace(self, path: str, old_str: str, new_str: str) -> str:
        resolved = self._existing_file(path)
        if not old_str:
            raise WorkspaceError("old_str is empty; give the exact text to replace (use insert to add text)")
        text = self._read_text(resolved)
        count = text.count(old_str)
        if count == 0:
            raise WorkspaceError(
                f"old_str was not found in {self.show(resolved)}; view the file and copy the exact text, "
                "whitespace and indentation included"
            )
        if count > 1:
            starts = [match.start() for match in re.finditer(re.escape(old_str), text)]
            lines = ", ".join(str(text.count("\n", 0, start) + 1) for start in starts[:20])
            raise WorkspaceError(
                f"old_str occurs {count} times in {self.show(resolved)} (starting on lines {lines}); "
                "include more surrounding lines so that it occurs exactly once"
            )
        position = text.index(old_str)
        updated = text[:position] + new_str + text[position + len(old_str) :]
        self._write_text(resolved, updated)
        first = updated.count("\n", 0, position) + 1
        last = first + new_str.count("\n")
        return f"Edited {self.show(resolved)}. The changed region now reads:\n" + self._snippet(updated, first, last)

    def insert(self, path: str, insert_line: int, text: str) -> str:
        resolved = self._existing_file(path)
        content = self._read_text(resolved)
        lines = content.splitlines(keepends=True)
        if insert_line < 0 or insert_line > len(lines):
            raise WorkspaceError(
                f"insert_line {insert_line} is out of range: {self.show(resolved)} has {len(lines)} lines "
                "(0 inserts at the top)"
            )
        if insert_line > 0 and not lines[insert_line - 1].endswith(("\n", "\r")):
            lines[insert_line - 1] += "\n"
        if insert_line < len(lines) and text and not text.endswith("\n"):
            text += "\n"
        lines.insert(insert_line, text)
        updated = "".join(lines)
        self._write_text(resolved, updated)
        inserted = max(1, len(text.splitlines()))
        return f"Inserted {inserted} line(s) after line {insert_line} of {self.show(resolved)}:\n" + self._snippet(
            updated, insert_line + 1, insert_line + inserted
        )

    def list_files(self, path: str = ".") -> str:
        resolved = self.resolve(path)
        if not resolved.exists():
            raise WorkspaceError(f"{path!r} does not exist")
        shown: list[str] = []
        total = 0
        for file in self._walk_files(resolved):
            total += 1
            if len(shown) < LIST_MAX_FILES:
                shown.append(self.show(file))
        if not shown:
            return f"no files under {self.show(resolved)}"
        text = "\n".join(shown)
        if total > len(shown):
            text += f"\n[... {total - len(shown)} more files not shown; list a subdirectory]"
        return text

    def search(self, pattern: str, path: str = ".", regex: bool = False, ignore_case: bool = False) -> str:
        if not pattern:
            raise WorkspaceError("pattern is empty")
        flags = re.IGNORECASE if ignore_case else 0
        try:
            compiled = re.compile(pattern if regex else re.escape(pattern), flags)
        except re.error as error:
            raise WorkspaceError(f"invalid regular expression {pattern!r}: {error}") from None
        resolved = self.resolve(path)
        if not resolved.exists():
            raise WorkspaceError(f"{path!r} does not exist")
        matches: list[str] = []
        more = 0
        for file in self._walk_files(resolved):
            real = file.resolve()
            if not is_inside(real, self.root) or not real.is_file():
                continue  # a link to somewhere outside: its content is not ours to show
            try:
                if real.stat().st_size > SEARCH_MAX_FILE_BYTES:
                    continue
                data = real.read_bytes()
            except OSError:
                continue
            if _is_binary(data):
                continue
            for number, line in enumerate(data.decode("utf-8", errors="replace").splitlines(), start=1):
                if compiled.search(line):
                    if len(matches) >= SEARCH_MAX_MATCHES:
                        more += 1
                        continue
                    line = line.strip()
                    if len(line) > SEARCH_LINE_MAX_CHARS:
                        line = line[:SEARCH_LINE_MAX_CHARS] + " [...]"
                    matches.append(f"{self.show(file)}:{number}: {line}")
        if not matches:
            return f"no matches for {pattern!r} under {self.show(resolved)}"
        text = "\n".join(matches)
        if more:
            text += f"\n[... {more} more matches not shown; narrow the pattern or the path]"
        return text


def _format_command(command: str, result: CommandResult) -> str:
    where = "sandbox without network" if result.sandboxed else "unsandboxed"
    output = result.output if result.output else "(no output)"
    return f"$ {command}\n{output.rstrip()}\n[exit code {result.exit_code}; {where}; {result.duration_seconds:.1f}s]"


class _Git:
    """Read-only git queries, run through the sandbox like any command.

    The model can write files in the workspace; a planted `core.fsmonitor` or diff driver
    would run a program, so git runs sandboxed too and with those hooks switched off.
    """

    _BASE: ClassVar[list[str]] = ["git", "--no-pager", "-c", "core.fsmonitor=false", "-c", "color.ui=false"]

    def __init__(self, root: Path, mode: SandboxMode) -> None:
        self._root = root
        self._mode = mode
        # Never let git find a repository above the workspace and report on it.
        self._env = {"GIT_CEILING_DIRECTORIES": str(root.parent), "GIT_OPTIONAL_LOCKS": "0"}

    async def _git(self, *args: str) -> CommandResult:
        return await run_command(
            shlex.join([*self._BASE, *args]), self._root, GIT_TIMEOUT_SECONDS, self._mode, extra_env=self._env
        )

    async def _require_repository(self) -> None:
        result = await self._git("rev-parse", "--is-inside-work-tree")
        if result.exit_code != 0 or result.output.strip() != "true":
            raise WorkspaceError("the workspace is not a git repository, so there is no git status or diff")

    async def _checked(self, *args: str) -> str:
        result = await self._git(*args)
        if result.timed_out:
            raise WorkspaceError(f"git {args[0]} timed out after {GIT_TIMEOUT_SECONDS}s")
        if result.exit_code != 0:
            raise WorkspaceError(f"git {args[0]} failed (exit code {result.exit_code}): {result.output.strip()}")
        return result.output

    async def status(self) -> str:
        await self._require_repository()
        return (await self._checked("status", "--short", "--branch")).rstrip() or "nothing to report"

    async def diff(self) -> str:
        await self._require_repository()
        diff_options = ("--no-ext-diff", "--no-textconv")
        has_head = (await self._git("rev-parse", "--verify", "--quiet", "HEAD")).exit_code == 0
        if has_head:
            changes = await self._checked("diff", *diff_options, "HEAD")
        else:
            changes = await self._checked("diff", *diff_options, "--cached") + await self._checked(
                "diff", *diff_options
            )
        untracked = (await self._checked("ls-files", "--others", "--exclude-standard")).split("\n")
        untracked = [name for name in untracked if name]
        parts = [changes.rstrip()] if changes.strip() else []
        if untracked:
            header = "Untracked files (new, not in the diff above; use view to read them):"
            parts.append(header + "\n" + "\n".join(untracked))
        return "\n\n".join(parts) if parts else "no changes"


def create_server(root: Path, sandbox: SandboxMode = "auto", egress: EgressSandbox | None = None) -> FastMCP:
    """Build the FastMCP server for `root`. Separate from `main` so that it can be embedded.

    `egress`: `run` commands reach the host's egress proxy (SPEC 7.1); git never does.
    """
    workspace = Workspace(root)
    git = _Git(workspace.root, sandbox)
    server = FastMCP("workspace", instructions=WORKSPACE_SYSTEM_PROMPT, log_level="WARNING")

    @server.tool(structured_output=False)
    async def view(path: str, view_range: list[int] | None = None) -> str:
        """Show a file with line numbers, or list a directory two levels deep.

        path: relative to the workspace root. view_range: [first_line, last_line], 1-based
        and inclusive; last_line -1 means the end of the file. Files longer than 2000
        lines are shown in part; use view_range for the rest.
        """
        return await anyio.to_thread.run_sync(workspace.view, path, view_range)

    @server.tool(structured_output=False)
    async def create(path: str, content: str) -> str:
        """Write a file with the given content, creating parent directories.

        An existing file is overwritten (prefer str_replace to change part of a file).
        """
        return await anyio.to_thread.run_sync(workspace.create, path, content)

    @server.tool(structured_output=False)
    async def str_replace(path: str, old_str: str, new_str: str) -> str:
        """Replace the text old_str with new_str in a file.

        old_str must match exactly (whitespace and indentation included) and occur exactly
        once; add surrounding lines to make it unique. Returns the edited region.
        """
        return await anyio.to_thread.run_sync(workspace.str_replace, path, old_str, new_str)

    @server.tool(structured_output=False)
    async def insert(path: str, insert_line: int, text: str) -> str:
        """Insert text after line insert_line of a file (0 inserts at the top)."""
        return await anyio.to_thread.run_sync(workspace.insert, path, insert_line, text)

    @server.tool(structured_output=False)
    async def list_files(path: str = ".") -> str:
        """List the files under a directory recursively (skips .git; at most 1000 shown)."""
        return await anyio.to_thread.run_sync(workspace.list_files, path)

    @server.tool(structured_output=False)
    async def search(pattern: str, path: str = ".", regex: bool = False, ignore_case: bool = False) -> str:
        """Search file contents for a plain string (or a Python regex with regex=true).

        Prints `file:line: text` for each matching line, at most 200; binary files and .git
        are skipped.
        """
        return await anyio.to_thread.run_sync(workspace.search, pattern, path, regex, ignore_case)

    @server.tool(structured_output=False)
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
        result = await run_command(command, workspace.root, timeout_seconds, sandbox, egress=egress)
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

    @server.tool(structured_output=False)
    async def git_status() -> str:
        """Show the branch and the changed and untracked files (git status --short --branch)."""
        return await git.status()

    @server.tool(structured_output=False)
    async def git_diff() -> str:
        """Show every change against HEAD (staged and unstaged) and list untracked files."""
        return await git.diff()

    return server


def main(argv: list[str] | None = None) -> None:
    """Serve the workspace over stdio until the client closes stdin."""
    parser = argparse.ArgumentParser(
        prog="coding-agent mcp-workspace", description="The built-in workspace MCP server (stdio)."
    )
    parser.add_argument("--root", required=True, help="the workspace directory every path is confined to")
    parser.add_argument(
        "--sandbox",
        choices=("auto", "bwrap", "none"),
        default="auto",
        help="auto: bwrap when it works here, else a plain subprocess (default)",
    )
    options = parser.parse_args(argv)
    root = Path(options.root)
    if not root.is_dir():
        parser.error(f"--root {options.root!r} is not a directory")
    create_server(root, options.sandbox, EgressSandbox.from_environment()).run("stdio")


if __name__ == "__main__":
    main()

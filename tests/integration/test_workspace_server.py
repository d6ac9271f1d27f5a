"""The built-in workspace MCP server, spoken to over real stdio with the mcp client."""

from __future__ import annotations

import os
import socket
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest
from mcp import ClientSession
from mcp.client.stdio import StdioServerParameters, stdio_client
from mcp.types import TextContent

from coding_agent.tools.host_git import git_dir_for
from coding_agent.tools.sandbox import bwrap_usable
from coding_agent.tools.workspace_server import WORKSPACE_SYSTEM_PROMPT
from tests.support.git_repos import checkout_like
from tests.support.waiting import wait_for

EXPECTED_TOOLS = {"view", "create", "str_replace", "insert", "list_files", "search", "run", "git_status", "git_diff"}


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    """A git work tree with one committed file, its git directory beside it (as a run's clone)."""
    root = (tmp_path / "workspaces" / "repo").resolve()
    return checkout_like(root, git_dir_for(root), {"hello.py": "def hello():\n    print('hello')\n\n\nhello()\n"})


@pytest.fixture
def outside(tmp_path: Path) -> Path:
    """A directory beside the workspace holding something the model must never read."""
    path = (tmp_path / "outside").resolve()
    path.mkdir()
    (path / "secret.txt").write_text("TOPSECRET value\n")
    return path


@asynccontextmanager
async def workspace_session(
    root: Path, sandbox: str = "bwrap", env: dict[str, str] | None = None
) -> AsyncIterator[ClientSession]:
    params = StdioServerParameters(
        command=sys.executable,
        args=["-m", "coding_agent.tools.workspace_server", "--root", str(root), "--sandbox", sandbox],
        env=env,
    )
    async with stdio_client(params) as (read, write), ClientSession(read, write) as session:
        await session.initialize()
        yield session


async def call(session: ClientSession, tool: str, **arguments: Any) -> tuple[str, bool]:
    """The joined text of a tool result and its isError flag."""
    result = await session.call_tool(tool, arguments)
    text = "\n".join(item.text for item in result.content if isinstance(item, TextContent))
    return text, bool(result.isError)


def _process_gone(pid: int) -> bool:
    """Dead or a zombie waiting for a reaper: either way it no longer runs."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except (FileNotFoundError, ProcessLookupError):
        return True
    return stat.rsplit(")", 1)[1].split()[0] == "Z"


async def test_lists_the_workspace_tools(repo: Path) -> None:
    async with workspace_session(repo) as session:
        listed = await session.list_tools()
    assert {tool.name for tool in listed.tools} == EXPECTED_TOOLS
    assert "str_replace" in WORKSPACE_SYSTEM_PROMPT


async def test_edit_cycle_and_git(repo: Path) -> None:
    async with workspace_session(repo) as session:
        text, error = await call(session, "view", path="hello.py")
        assert not error
        assert text.splitlines()[1] == "     2\t    print('hello')"

        text, error = await call(session, "create", path="pkg/util.py", content="A = 1\nB = 2\n")
        assert (text, error) == ("Created pkg/util.py (2 lines)", False)
        assert (repo / "pkg" / "util.py").read_text() == "A = 1\nB = 2\n"

        text, error = await call(session, "create", path="pkg/util.py", content="A = 1\nB = 2\nC = 3\n")
        assert text.startswith("Overwrote pkg/util.py") and not error

        text, error = await call(session, "str_replace", path="hello.py", old_str="'hello'", new_str="'hi there'")
        assert not error and "print('hi there')" in text
        assert "print('hi there')" in (repo / "hello.py").read_text()

        text, error = await call(session, "insert", path="pkg/util.py", insert_line=1, text="# between")
        assert not error
        assert (repo / "pkg" / "util.py").read_text() == "A = 1\n# between\nB = 2\nC = 3\n"

        text, error = await call(session, "view", path="pkg/util.py", view_range=[2, 3])
        assert (text, error) == ("     2\t# between\n     3\tB = 2", False)

        text, error = await call(session, "view", path=".")
        assert not error and {"hello.py", "pkg/", "pkg/util.py"} <= set(text.splitlines())
        assert ".git" not in text

        text, error = await call(session, "list_files")
        assert (text.splitlines(), error) == (["hello.py", "pkg/util.py"], False)

        text, error = await call(session, "search", pattern="B = 2")
        assert (text, error) == ("pkg/util.py:3: B = 2", False)
        text, error = await call(session, "search", pattern=r"^[AC] = \d", regex=True)
        assert text.splitlines() == ["pkg/util.py:1: A = 1", "pkg/util.py:4: C = 3"]
        text, error = await call(session, "search", pattern="nowhere to be found")
        assert "no matches" in text and not error

        text, error = await call(session, "git_status")
        assert not error
        assert " M hello.py" in text and "?? pkg/" in text

        text, error = await call(session, "git_diff")
        assert not error
        assert "-    print('hello')" in text and "+    print('hi there')" in text
        assert "Untracked files" in text and "pkg/util.py" in text


async def test_edit_errors_are_tool_errors(repo: Path) -> None:
    (repo / "twice.txt").write_text("same\nsame\n")
    async with workspace_session(repo) as session:
        text, error = await call(session, "str_replace", path="hello.py", old_str="absent text", new_str="x")
        assert error and "not found" in text
        text, error = await call(session, "str_replace", path="twice.txt", old_str="same", new_str="x")
        assert error and "occurs 2 times" in text and "lines 1, 2" in text
        text, error = await call(session, "str_replace", path="missing.py", old_str="a", new_str="b")
        assert error and "does not exist" in text
        text, error = await call(session, "insert", path="twice.txt", insert_line=7, text="x")
        assert error and "out of range" in text
        text, error = await call(session, "view", path="hello.py", view_range=[9, 12])
        assert error and "has 5 lines" in text
        text, error = await call(session, "search", pattern="(unclosed", regex=True)
        assert error and "invalid regular expression" in text
        # The server survives its errors.
        text, error = await call(session, "view", path="twice.txt")
        assert not error and "same" in text
    assert (repo / "twice.txt").read_text() == "same\nsame\n"


async def test_paths_outside_the_workspace_are_refused(repo: Path, outside: Path) -> None:
    (repo / "etc_link").symlink_to("/etc", target_is_directory=True)
    (repo / "out_dir").symlink_to(outside, target_is_directory=True)
    (repo / "leak.txt").symlink_to(outside / "secret.txt")
    async with workspace_session(repo) as session:
        for path in ("../x", "/etc/passwd", "etc_link/passwd", "leak.txt", "out_dir/secret.txt"):
            text, error = await call(session, "view", path=path)
            assert error, path
            assert "outside the workspace" in text, path
            assert "TOPSECRET" not in text and "root:" not in text, path

        text, error = await call(session, "create", path="out_dir/planted.txt", content="x")
        assert error and "outside the workspace" in text
        text, error = await call(session, "create", path="../planted.txt", content="x")
        assert error and "outside the workspace" in text
        text, error = await call(session, "list_files", path="out_dir")
        assert error and "outside the workspace" in text

        text, error = await call(session, "search", pattern="TOPSECRET")
        assert not error and "no matches" in text

        text, error = await call(session, "create", path=".git/hooks/pre-commit", content="#!/bin/sh\n")
        assert error and ".git" in text

        text, error = await call(session, "view", path=str(repo / "hello.py"))
        assert not error and "hello" in text
    assert not (outside / "planted.txt").exists()
    assert not (repo.parent / "planted.txt").exists()
    assert not (repo / ".git").exists()


async def test_git_tools_outside_a_repository(tmp_path: Path) -> None:
    plain = (tmp_path / "plain").resolve()
    plain.mkdir()
    async with workspace_session(plain) as session:
        for tool in ("git_status", "git_diff"):
            text, error = await call(session, tool)
            assert error and "not a git repository" in text


@pytest.mark.parametrize("sandbox", ["none", "bwrap"])
async def test_run_executes_in_the_workspace_with_a_scrubbed_environment(repo: Path, sandbox: str) -> None:
    env = dict(os.environ, GITHUB_TOKEN="sekrit-token-4711", OPENAI_API_KEY="sk-sekrit-4712")
    async with workspace_session(repo, sandbox, env=env) as session:
        text, error = await call(session, "run", command="pwd && ls && echo to-stderr >&2 && exit 3")
        environment, env_error = await call(session, "run", command="env")
    assert not error
    lines = text.splitlines()
    assert str(repo) in lines and "hello.py" in lines and "to-stderr" in lines
    assert "[exit code 3;" in text

    assert not env_error
    assert "PATH=" in environment  # the environment really was printed
    assert "sekrit-token-4711" not in environment and "sk-sekrit-4712" not in environment
    assert "GITHUB_TOKEN" not in environment and "OPENAI_API_KEY" not in environment


async def test_run_inside_bwrap_has_no_network(repo: Path) -> None:
    assert bwrap_usable(), "bwrap must work here: the sandbox tests do not skip"
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen(8)
        port = listener.getsockname()[1]
        probe = (
            'python3 -c "import socket; '
            f"socket.create_connection(('127.0.0.1', {port}), timeout=5); print('CONN' + 'ECTED')\""
        )
        async with workspace_session(repo, "none") as session:
            control, _ = await call(session, "run", command=probe)
        async with workspace_session(repo, "bwrap") as session:
            sandboxed, error = await call(session, "run", command=probe)
    assert "CONNECTED" in control.splitlines()  # the probe works when nothing blocks it
    assert not error
    assert "CONNECTED" not in sandboxed.splitlines()
    assert "[exit code 0;" not in sandboxed and "sandbox without network" in sandboxed


async def test_run_timeout_reports_and_kills(repo: Path) -> None:
    async with workspace_session(repo) as session:
        text, error = await call(session, "run", command="echo started; sleep 30", timeout_seconds=1)
    assert error
    assert "timed out after 1s" in text and "started" in text


async def test_run_timeout_kills_background_children(repo: Path) -> None:
    async with workspace_session(repo, "none") as session:
        text, error = await call(session, "run", command="sleep 30 & echo $! > bg.pid; wait", timeout_seconds=1)
    assert error and "timed out" in text
    pid = int((repo / "bg.pid").read_text())
    assert wait_for(lambda: _process_gone(pid), 10, f"background process {pid} to be killed")


async def test_run_output_is_capped(repo: Path) -> None:
    async with workspace_session(repo) as session:
        command = "python3 -c \"print('x' * 200000); print('THE END')\""
        text, error = await call(session, "run", command=command)
    assert not error
    assert "bytes of output cut" in text and "THE END" in text
    assert len(text) < 50000

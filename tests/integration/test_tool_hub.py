"""ToolHub against real MCP servers over stdio: the built-in workspace server, the npm
filesystem server and a tiny test server (tests/integration/slow_mcp_server.py)."""

from __future__ import annotations

import asyncio
import os
import signal
import sys
from pathlib import Path
from typing import TextIO

import anyio
import pytest

from coding_agent.config import MCPServerConfig, ToolsConfig, builtin_workspace_server
from coding_agent.errors import ToolError
from coding_agent.tools.hub import ToolHub, cap_output
from coding_agent.tools.mcp_connection import Connection, Launch
from coding_agent.tools.sandbox import scrubbed_environment
from coding_agent.tools.workspace_server import WORKSPACE_SYSTEM_PROMPT

TEST_SERVER_SCRIPT = Path(__file__).with_name("slow_mcp_server.py")


def workspace_server() -> MCPServerConfig:
    """The built-in workspace server as the config adds it (in this process)."""
    return builtin_workspace_server()


def filesystem_server(**overrides: object) -> MCPServerConfig:
    return MCPServerConfig.model_validate(
        {
            "mcp_server_name": "filesystem",
            "command": ["mcp-server-filesystem", "{workspace}"],
            "system_prompt": "Filesystem tools take absolute paths.",
            **overrides,
        }
    )


def scripted_server(**overrides: object) -> MCPServerConfig:
    return MCPServerConfig.model_validate(
        {"mcp_server_name": "testing", "command": [sys.executable, str(TEST_SERVER_SCRIPT)], **overrides}
    )


@pytest.fixture
def workspace(tmp_path: Path) -> Path:
    root = (tmp_path / "workspace").resolve()
    root.mkdir()
    (root / "readme.md").write_text("# demo\n")
    return root


def _environ(pid: int) -> dict[str, str]:
    raw = Path(f"/proc/{pid}/environ").read_bytes()
    pairs = (item.split(b"=", 1) for item in raw.split(b"\0") if b"=" in item)
    return {key.decode(): value.decode(errors="replace") for key, value in pairs}


def _processes_mentioning(marker: str) -> list[int]:
    """Live processes whose command line contains `marker` (zombies have an empty one)."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            cmdline = (entry / "cmdline").read_bytes()
        except OSError:
            continue
        if marker.encode() in cmdline:
            found.append(int(entry.name))
    return found


async def test_two_servers_offer_prefixed_tools_and_both_answer(workspace: Path) -> None:
    hub = ToolHub([workspace_server(), filesystem_server()], ToolsConfig(), workspace)
    async with hub:
        names = {spec.name for spec in hub.tool_specs}
        assert {"workspace/view", "workspace/run", "workspace/git_diff"} <= names
        assert {"filesystem/read_text_file", "filesystem/list_allowed_directories"} <= names
        assert all(name.split("/", 1)[0] in {"workspace", "filesystem"} for name in names)
        view = next(spec for spec in hub.tool_specs if spec.name == "workspace/view")
        assert "path" in view.input_schema["properties"] and view.description
        assert hub.system_prompts == {
            "workspace": WORKSPACE_SYSTEM_PROMPT,
            "filesystem": "Filesystem tools take absolute paths.",
        }

        created = await hub.call("workspace/create", {"path": "notes/hello.txt", "content": "hello from workspace\n"})
        assert not created.is_error and created.name == "workspace/create"
        assert created.duration_seconds > 0

        read = await hub.call("filesystem/read_text_file", {"path": str(workspace / "notes" / "hello.txt")})
        assert (read.text, read.is_error) == ("hello from workspace\n", False)
        assert (read.output_chars, read.cut_chars) == (len(read.text), 0)


async def test_tools_allow_filters_the_offered_and_callable_tools(workspace: Path) -> None:
    allow = ["read_text_file", "filesystem/list_allowed_*"]
    async with ToolHub([filesystem_server(tools_allow=allow)], ToolsConfig(), workspace) as hub:
        assert {spec.name for spec in hub.tool_specs} == {
            "filesystem/read_text_file",
            "filesystem/list_allowed_directories",
        }
        refused = await hub.call("filesystem/write_file", {"path": str(workspace / "x.txt"), "content": "x"})
        listed = await hub.call("filesystem/list_allowed_directories", {})
    assert refused.is_error and "unknown tool" in refused.text
    assert not (workspace / "x.txt").exists()
    assert not listed.is_error and str(workspace) in listed.text


async def test_unknown_tool_is_an_error_result_naming_the_known_tools(workspace: Path) -> None:
    async with ToolHub([scripted_server()], ToolsConfig(), workspace) as hub:
        result = await hub.call("testing/nope", {})
        bad_args = await hub.call("testing/echo", ["not", "an", "object"])  # type: ignore[arg-type]
    assert result.is_error
    assert "unknown tool 'testing/nope'" in result.text
    assert "testing/echo" in result.text and "testing/slow" in result.text
    assert bad_args.is_error and "JSON object" in bad_args.text


async def test_output_over_the_cap_is_cut_with_a_marker(workspace: Path) -> None:
    async with ToolHub([scripted_server()], ToolsConfig(max_output_chars=1000), workspace) as hub:
        big = await hub.call("testing/big", {"chars": 5000})
        small = await hub.call("testing/big", {"chars": 10})
    assert not big.is_error
    assert (big.output_chars, big.cut_chars) == (5000, 4000)
    assert "[... 4000 characters cut ...]" in big.text
    assert big.text.startswith("a" * 750) and big.text.endswith("z" * 250)
    assert (small.text, small.cut_chars) == ("aaaaazzzzz", 0)


async def test_server_errors_and_non_text_content(workspace: Path) -> None:
    async with ToolHub([scripted_server()], ToolsConfig(), workspace) as hub:
        failed = await hub.call("testing/fail", {"reason": "boom at line 3"})
        invalid = await hub.call("testing/echo", {"wrong": 1})
        picture = await hub.call("testing/picture", {})
    assert failed.is_error and "boom at line 3" in failed.text
    assert invalid.is_error and "text" in invalid.text
    assert not picture.is_error and "[image content: image/png" in picture.text


async def test_timeout_is_an_error_result_and_the_server_stays_usable(workspace: Path) -> None:
    async with ToolHub([scripted_server()], ToolsConfig(call_timeout_seconds=0.5), workspace) as hub:
        pid = hub.server_pids()["testing"]
        slow = await hub.call("testing/slow", {"seconds": 30})
        after = await hub.call("testing/echo", {"text": "still here"})
        assert hub.server_pids()["testing"] == pid
    assert slow.is_error and "timed out after 0.5s" in slow.text
    assert slow.duration_seconds < 10
    assert (after.text, after.is_error) == ("still here", False)


async def test_a_call_that_asks_for_more_time_gets_it(workspace: Path) -> None:
    """`run` with its own timeout_seconds is not abandoned at the hub's shorter default."""
    async with ToolHub([workspace_server()], ToolsConfig(call_timeout_seconds=0.5), workspace) as hub:
        result = await hub.call("workspace/run", {"command": "sleep 1.5; echo finished", "timeout_seconds": 10})
    assert not result.is_error, result.text
    assert "finished" in result.text


async def test_a_dead_server_is_restarted_once_then_reported_down(workspace: Path) -> None:
    async with ToolHub([scripted_server(), workspace_server()], ToolsConfig(), workspace) as hub:
        first = hub.server_pids()["testing"]
        os.kill(first, signal.SIGKILL)
        # Several calls meet the dead server at once: one restart serves them all.
        revived = await asyncio.gather(*(hub.call("testing/echo", {"text": f"after restart {i}"}) for i in range(5)))
        assert [(r.text, r.is_error) for r in revived] == [(f"after restart {i}", False) for i in range(5)]
        second = hub.server_pids()["testing"]
        assert second != first

        os.kill(second, signal.SIGKILL)
        down = await hub.call("testing/echo", {"text": "again"})
        assert down.is_error and "'testing' is down" in down.text
        assert "testing" not in hub.server_pids()

        other = await hub.call("workspace/view", {"path": "readme.md"})
        assert (other.text, other.is_error) == ("     1\t# demo", False)


async def test_server_environment_holds_no_secret(workspace: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    secret = "ghp_sekrit0123456789"
    monkeypatch.setenv("GITHUB_TOKEN", secret)
    monkeypatch.setenv("SOME_OTHER_TOKEN", "unrelated-but-not-allow-listed")
    env = {"LEAKY_HEADER": f"Bearer {secret}", "ROOT_DIR": "{workspace}"}
    # (The built-in workspace server runs in this process: test_workspace_inprocess.py.)
    servers = [scripted_server(env=env), filesystem_server(env=env)]
    async with ToolHub(servers, ToolsConfig(), workspace, secrets=[secret]) as hub:
        pids = hub.server_pids()
        assert set(pids) == {"testing", "filesystem"}
        for pid in pids.values():
            raw = Path(f"/proc/{pid}/environ").read_bytes()
            environ = _environ(pid)
            assert secret.encode() not in raw
            assert "GITHUB_TOKEN" not in environ and "LEAKY_HEADER" not in environ
            assert "SOME_OTHER_TOKEN" not in environ
            assert environ["ROOT_DIR"] == str(workspace)
            assert environ["PATH"] == os.environ["PATH"]


async def test_one_process_per_server_for_many_calls(workspace: Path) -> None:
    async with ToolHub([workspace_server(), filesystem_server()], ToolsConfig(), workspace) as hub:
        pids = hub.server_pids()
        for _ in range(20):
            assert not (await hub.call("workspace/view", {"path": "readme.md"})).is_error
            assert not (await hub.call("filesystem/list_allowed_directories", {})).is_error
        together = await asyncio.gather(*(hub.call("workspace/search", {"pattern": f"demo{i}"}) for i in range(10)))
        assert hub.server_pids() == pids
    assert [f"demo{i}" in result.text for i, result in enumerate(together)] == [True] * 10
    for pid in pids.values():
        assert not Path(f"/proc/{pid}").exists()  # stopped and reaped, no zombie


async def test_missing_command_fails_naming_server_and_program(workspace: Path) -> None:
    broken = MCPServerConfig(
        mcp_server_name="broken", command=["no-such-mcp-server-xyz", "--flag"], env={"API_KEY": "value-31337"}
    )
    marker = str(workspace)
    with pytest.raises(ToolError) as caught:
        async with ToolHub([workspace_server(), broken], ToolsConfig(), workspace):
            pass
    message = str(caught.value)
    assert "'broken'" in message and "no-such-mcp-server-xyz" in message and "not found" in message
    assert "value-31337" not in message
    assert _processes_mentioning(marker) == []  # the workspace server that did start was stopped


async def test_server_exiting_during_startup_is_reported(workspace: Path) -> None:
    quitter = MCPServerConfig(mcp_server_name="quitter", command=[sys.executable, "-c", "import sys; sys.exit(3)"])
    with pytest.raises(ToolError, match=r"'quitter'.*exited during startup"):
        async with ToolHub([quitter], ToolsConfig(), workspace):
            pass


async def test_a_server_whose_end_is_seen_before_its_session_error_fails_its_start(workspace: Path) -> None:
    """The race behind a flaky failed-start test: a server that exits at once can have its
    stderr's end noticed (which wakes the runner, as a stop does) before the transport's
    own error reaches the runner. That end is still a failed start, not a stop: the
    runner used to report no error, and the hub went on as if the server had started
    with no tools. The order is forced here; with real processes it comes under load."""

    class EndSeenFirst(Connection):
        async def _serve(self, errlog: TextIO) -> None:
            errlog.close()
            self._wake.set()  # what the stderr reader does at the end of the server's stderr
            raise anyio.BrokenResourceError  # then the transport's error (a write to a gone stdin)

    connection = EndSeenFirst(Launch("quick-exit", [sys.executable], {}, workspace), [])
    connection.start()
    await asyncio.wait_for(connection.ready.wait(), 10)
    assert connection.startup_error is not None
    assert "'quick-exit'" in str(connection.startup_error) and "handshake" in str(connection.startup_error)


async def test_a_server_gone_before_the_handshake_is_reported_as_exited_whichever_error_comes_first(
    workspace: Path,
) -> None:
    """A server that exits at once fails its start through the session (a closed
    connection: `_startup_failed`, "exited during startup") or, under load, through the
    transport first (a write to its gone stdin). Both are the same exit, said the same way."""

    class WriteFailsFirst(Connection):
        async def _serve(self, errlog: TextIO) -> None:
            errlog.close()
            raise anyio.BrokenResourceError  # the initialize request written to a gone stdin

    connection = WriteFailsFirst(Launch("quick-exit", [sys.executable], {}, workspace), [])
    connection.start()
    await asyncio.wait_for(connection.ready.wait(), 10)
    assert connection.startup_error is not None
    assert "'quick-exit'" in str(connection.startup_error) and "exited during startup" in str(connection.startup_error)


async def test_server_that_never_answers_times_out_at_startup(workspace: Path) -> None:
    marker = f"silent-server-{os.getpid()}-{id(workspace)}"
    silent = MCPServerConfig(
        mcp_server_name="silent", command=[sys.executable, "-c", "import time; time.sleep(60)", marker]
    )
    with pytest.raises(ToolError, match=r"'silent'.*within 1s"):
        async with ToolHub([silent], ToolsConfig(startup_timeout_seconds=1), workspace):
            pass
    assert _processes_mentioning(marker) == []


def test_scrubbed_environment_is_an_allow_list_without_secrets() -> None:
    source = {"PATH": "/bin", "HOME": "/home/x", "GITHUB_TOKEN": "t0k", "AWS_SECRET": "s", "LANG": "C.UTF-8"}
    env = scrubbed_environment({"EXTRA": "ok", "HIDDEN": "x-t0k-y"}, secrets=["t0k", ""], source=source)
    assert env == {"PATH": "/bin", "HOME": "/home/x", "LANG": "C.UTF-8", "EXTRA": "ok"}


def test_cap_output_keeps_head_and_tail() -> None:
    assert cap_output("short", 10) == ("short", 0)
    text, cut = cap_output("0123456789" * 3, 8)
    assert cut == 22
    assert text == "012345\n[... 22 characters cut ...]\n89"


async def test_results_never_carry_a_secret_and_calls_after_exit_are_refused(workspace: Path) -> None:
    secret = "glpat-sekrit-98765"
    hub = ToolHub([scripted_server()], ToolsConfig(), workspace, secrets=[secret])
    async with hub:
        echoed = await hub.call("testing/echo", {"text": f"token={secret}"})
        pid = hub.server_pids()["testing"]
    after = await hub.call("testing/echo", {"text": "hello"})
    assert echoed.text == "token=***" and not echoed.is_error
    assert after.is_error and "closed" in after.text
    assert hub.server_pids() == {} and not Path(f"/proc/{pid}").exists()

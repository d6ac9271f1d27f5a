"""The sandbox's bwrap command line and the `security.sandbox` key (SPEC 15)."""

from __future__ import annotations

from pathlib import Path

import pytest

from coding_agent.config import WorkspaceServerConfig, parse_config
from coding_agent.errors import ConfigError
from coding_agent.tools.bwrap import Bind, bwrap_argv

ROOT = Path("/srv/workspaces/run-1")


def _pairs(argv: list[str], flag: str) -> list[tuple[str, str]]:
    return [(argv[i + 1], argv[i + 2]) for i, part in enumerate(argv) if part == flag]


def test_the_sandbox_drops_everything_and_never_binds_the_root_filesystem() -> None:
    argv = bwrap_argv(["sh", "-c", "true"], ROOT, system_paths=["/usr", "/etc/ssl"])

    assert argv[0] == "bwrap" and argv[-4:] == ["--", "sh", "-c", "true"]
    for flag in ("--unshare-all", "--die-with-parent", "--new-session", "--clearenv"):
        assert flag in argv
    assert argv[argv.index("--cap-drop") + 1] == "ALL"
    assert _pairs(argv, "--ro-bind") == [("/usr", "/usr"), ("/etc/ssl", "/etc/ssl")]
    assert _pairs(argv, "--bind") == [(str(ROOT), str(ROOT))]
    assert "/" not in [source for source, _ in _pairs(argv, "--ro-bind") + _pairs(argv, "--bind")]
    assert argv.index("--tmpfs") < argv.index("--bind"), "the private /tmp comes before the workspace bind"
    assert dict(_pairs(argv, "--setenv")).keys() == {"PATH", "HOME", "LANG", "TERM"}


def test_extra_binds_and_variables_are_added_without_changing_the_rest() -> None:
    plain = bwrap_argv(["true"], ROOT, system_paths=[])
    extended = bwrap_argv(
        ["true"],
        ROOT,
        system_paths=[],
        extra_binds=[Bind("/run/egress.sock", "/tmp/egress.sock")],
        extra_env={"HTTPS_PROXY": "http://localhost:3128"},
    )

    assert ("/run/egress.sock", "/tmp/egress.sock") in _pairs(extended, "--ro-bind")
    assert dict(_pairs(extended, "--setenv"))["HTTPS_PROXY"] == "http://localhost:3128"
    remaining = iter(extended)
    assert all(part in remaining for part in plain), "the plain command line is a subsequence of the extended one"


def _config(**security: object) -> dict[str, object]:
    return {
        "task_source": "github",
        "github": {"token": "t", "owner": "acme"},
        "llm": {"provider": "openai", "openai": {"model": "m", "api_key": "k"}},
        "security": security,
    }


def test_tmp_size_caps_both_private_tmpfs_mounts() -> None:
    argv = bwrap_argv(["true"], ROOT, system_paths=[], tmp_size_bytes=2048)
    for mount in ("/tmp", "/var/tmp"):
        at = argv.index(mount, argv.index("--tmpfs"))
        assert argv[at - 3 : at] == ["--size", "2048", "--tmpfs"], argv
    assert "--size" not in bwrap_argv(["true"], ROOT, system_paths=[])


def test_security_sandbox_reaches_the_builtin_server_command() -> None:
    default = parse_config(_config(), env={})
    unsandboxed = parse_config(_config(sandbox="none"), env={})

    assert default.security.sandbox == "bwrap"
    assert default.mcp_servers[0].command[-2:] == ["--sandbox", "bwrap"]
    assert unsandboxed.mcp_servers[0].command[-2:] == ["--sandbox", "none"]
    assert unsandboxed.mcp_servers[0].command.count("--sandbox") == 1


def test_a_configured_builtin_server_cannot_choose_its_own_sandbox() -> None:
    data = _config()
    data["mcp_servers"] = [
        {"mcp_server_name": "workspace", "command": ["coding-agent", "mcp-workspace", "--root", "{workspace}", "--sandbox", "none"]},
        {"mcp_server_name": "other", "command": ["npx", "server", "--sandbox", "none"]},
    ]
    config = parse_config(data, env={})

    # A leading `coding-agent` runs with this interpreter (never looked up on PATH).
    assert config.mcp_servers[0].command[-5:] == ["mcp-workspace", "--root", "{workspace}", "--sandbox", "bwrap"]
    assert config.mcp_servers[1].command == ["npx", "server", "--sandbox", "none"], "other servers are left alone"


def test_the_entry_s_name_not_its_command_makes_it_the_workspace_server() -> None:
    """Only the entry named `workspace` stands for the built-in server; the same command
    under another name is one more server of the operator's, started as written."""
    data = _config()
    command = ["coding-agent", "mcp-workspace", "--root", "{workspace}", "--sandbox", "none"]
    data["mcp_servers"] = [{"mcp_server_name": "workspace", "command": command}, {"mcp_server_name": "ws", "command": command}]
    config = parse_config(data, env={})

    own, other = config.mcp_servers
    assert isinstance(own, WorkspaceServerConfig) and own.sandbox == "bwrap"
    assert not isinstance(other, WorkspaceServerConfig)
    assert other.command[-2:] == ["--sandbox", "none"]


def test_an_unknown_sandbox_mode_names_the_key() -> None:
    with pytest.raises(ConfigError, match="security.sandbox"):
        parse_config(_config(sandbox="auto"), env={})

"""The setup step on its own (SPEC 7.1): plans, limits, the cache, and what doctor shows.

Real bwrap, real git; the egress proxy is running with an empty allow-list.
"""

from __future__ import annotations

import subprocess
from typing import Any, cast
from pathlib import Path

import pytest
from typer.testing import CliRunner

from coding_agent.agent.environment import describe_egress
from coding_agent.cli import app
from coding_agent.config import AgentConfig, SetupConfig, parse_config
from coding_agent.tools.egress_proxy import EgressProxy
from coding_agent.tools.egress_sandbox import EgressSandbox
from coding_agent.tools.host_git import git_dir_for
from coding_agent.tools.sandbox import bwrap_usable
from coding_agent.workspace.env_setup import plan_setup, run_setup
from coding_agent.workspace.git import Git
from coding_agent.workspace.setup_cache import CacheScope, SetupCache
from tests.support.git_repos import checkout_like

SCOPE = CacheScope("github https://api.github.com 1", trusted=True)
needs_bwrap = pytest.mark.skipif(not bwrap_usable(Path("/tmp")), reason="bwrap cannot create namespaces here")


def _config(tmp_path: Path, **setup: object) -> AgentConfig:
    return parse_config(
        {
            "task_source": "github",
            "github": {"token": "t", "owner": "acme"},
            "llm": {"provider": "openai", "openai": {"base_url": "http://127.0.0.1:9", "model": "m", "api_key": "k"}},
            "setup": {"cache_dir": str(tmp_path / "cache"), **setup},
        }
    )


def _repository(path: Path) -> Path:
    return checkout_like(path, git_dir_for(path), {"requirements.txt": "tinypkg==1.0\n"})


def _sleepers(tag: str) -> list[int]:
    found = []
    for proc in Path("/proc").iterdir():
        if proc.name.isdigit():
            try:
                if tag in (proc / "cmdline").read_bytes().decode(errors="replace"):
                    found.append(int(proc.name))
            except OSError:
                continue
    return found


class _NoSource:
    async def read_default_branch_file(self, project: str, path: str) -> bytes | None:
        raise AssertionError("config commands never read the repository")


async def test_plan_uses_per_repository_overrides(tmp_path: Path) -> None:
    config = SetupConfig(commands=["echo global"], repositories={"acme/special": {"commands": ["echo special"]}})
    plain = await plan_setup(config, _NoSource(), "acme/widgets")  # type: ignore[arg-type]
    special = await plan_setup(config, _NoSource(), "acme/special")  # type: ignore[arg-type]
    assert plain is not None and "echo global" in plain.script
    assert special is not None and "echo special" in special.script and "global" not in special.script
    assert await plan_setup(SetupConfig(), _NoSource(), "acme/widgets") is None  # type: ignore[arg-type]


@needs_bwrap
async def test_runaway_setup_is_killed_with_its_tree_and_leaves_the_workspace_usable(tmp_path: Path) -> None:
    workspace = _repository(tmp_path / "workspaces" / "ws")
    tag = "4321.987"
    config = _config(
        tmp_path,
        commands=[
            "dd if=/dev/zero of=filler.bin bs=1M count=20 2>/dev/null",
            f"(sleep {tag} &)",
            f"setsid sleep {tag} &",
            f"echo STARTED; sleep {tag}",
        ],
        timeout_seconds=3,
    )
    plan = await plan_setup(config.setup, _NoSource(), "acme/widgets")  # type: ignore[arg-type]
    assert plan is not None
    async with EgressProxy([], []) as proxy:
        outcome = await run_setup(
            plan, "acme/widgets", workspace, config, EgressSandbox(proxy.socket_path), Git(timeout=30), scope=SCOPE
        )
    assert outcome.timed_out and not outcome.ok and "STARTED" in outcome.output_tail
    assert "timed out after 3s" in outcome.first_turn_note(3)
    assert not (workspace / "filler.bin").exists(), "what a failed setup created is removed"
    assert (workspace / "requirements.txt").read_text() == "tinypkg==1.0\n"
    assert _sleepers(tag) == [], "no process of the setup outlives it"
    assert not list((tmp_path / "cache").glob("*/*/setup.json")), "a failed setup fills no cache entry"


@needs_bwrap
async def test_setup_filling_the_disk_is_killed_at_its_limit_and_leaves_the_workspace_usable(tmp_path: Path) -> None:
    workspace = _repository(tmp_path / "workspaces" / "ws")
    tag = "4321.654"
    config = _config(
        tmp_path,
        commands=[
            f"setsid sleep {tag} &",
            "mkdir -p .deps && echo STARTED",
            # 1 MiB every 20 ms, without end: only the disk limit stops it.
            "i=0; while :; do head -c 1048576 /dev/zero > .deps/blob$i; i=$((i+1)); sleep 0.02; done",
        ],
        timeout_seconds=120,
        max_disk_mb=3,
    )
    plan = await plan_setup(config.setup, _NoSource(), "acme/widgets")  # type: ignore[arg-type]
    assert plan is not None and plan.max_disk_mb == 3
    async with EgressProxy([], []) as proxy:
        outcome = await run_setup(plan, "acme/widgets", workspace, config, EgressSandbox(proxy.socket_path), Git(timeout=30))
    assert not outcome.ok and not outcome.timed_out and outcome.disk_limit_mb == 3
    assert "STARTED" in outcome.output_tail
    note = outcome.first_turn_note(120)
    assert "wrote more than its limit of 3 MB (setup.max_disk_mb)" in note and "Carry on with the task" in note
    assert not (workspace / ".deps").exists(), "what the setup wrote is removed"
    assert (workspace / "requirements.txt").read_text() == "tinypkg==1.0\n"
    assert _sleepers(tag) == [], "no process of the setup outlives it"
    assert outcome.progress_note(120) is not None


@needs_bwrap
async def test_setup_tmp_is_capped_at_the_disk_limit(tmp_path: Path) -> None:
    """/tmp in the sandbox is memory: a setup cannot fill the host's RAM through it."""
    workspace = _repository(tmp_path / "workspaces" / "ws")
    config = _config(tmp_path, commands=["head -c 5242880 /dev/zero > /tmp/big"], max_disk_mb=2)
    plan = await plan_setup(config.setup, _NoSource(), "acme/widgets")  # type: ignore[arg-type]
    assert plan is not None
    outcome = await run_setup(plan, "acme/widgets", workspace, config, None, Git(timeout=30))
    assert outcome.exit_code not in (0, None) and "No space left on device" in outcome.output_tail


async def test_per_repository_disk_limit_overrides_the_global_one() -> None:
    config = SetupConfig(commands=["true"], max_disk_mb=100, repositories={"acme/big": {"max_disk_mb": 20000}})
    plain = await plan_setup(config, _NoSource(), "acme/widgets")  # type: ignore[arg-type]
    big = await plan_setup(config, _NoSource(), "acme/big")  # type: ignore[arg-type]
    assert plain is not None and big is not None and (plain.max_disk_mb, big.max_disk_mb) == (100, 20000)


@needs_bwrap
async def test_cache_hit_restores_and_lockfile_change_misses(tmp_path: Path) -> None:
    config = _config(tmp_path, commands=["mkdir -p .deps && echo built > .deps/lib.txt && echo RAN-SETUP"])
    plan = await plan_setup(config.setup, _NoSource(), "acme/widgets")  # type: ignore[arg-type]
    assert plan is not None
    first, second = (_repository(tmp_path / "workspaces" / name) for name in ("a", "b"))
    third = tmp_path / "workspaces" / "c"
    checkout_like(third, git_dir_for(third), {"requirements.txt": "tinypkg==2.0\n"})
    async with EgressProxy([], []) as proxy:
        egress, git = EgressSandbox(proxy.socket_path), Git(timeout=30)
        cold = await run_setup(plan, "acme/widgets", first, config, egress, git, scope=SCOPE)
        warm = await run_setup(plan, "acme/widgets", second, config, egress, git, scope=SCOPE)
        changed = await run_setup(plan, "acme/widgets", third, config, egress, git, scope=SCOPE)
    assert cold.ok and not cold.cached and "RAN-SETUP" in cold.output_tail
    assert warm.cached and "RAN-SETUP" in warm.output_tail and (second / ".deps/lib.txt").read_text() == "built\n"
    assert "restored from the setup cache" in warm.first_turn_note(600)
    assert not changed.cached, "another lockfile content is another cache entry"
    status = subprocess.run(["git", "status", "--porcelain"], cwd=second, capture_output=True, text=True).stdout
    assert ".deps" not in status, "the setup's files are kept out of the agent's commit"

    config_file = tmp_path / "config.yaml"
    config_file.write_text(
        "task_source: github\ngithub: {token: t, owner: acme}\n"
        "llm: {provider: openai, openai: {base_url: 'http://127.0.0.1:9', model: m, api_key: k}}\n"
        f"setup: {{cache_dir: '{tmp_path / 'cache'}'}}\n"
    )
    result = CliRunner().invoke(app, ["cache", "clear", "--config", str(config_file)])
    assert result.exit_code == 0 and "removed 2 cached setup(s)" in result.output, result.output
    assert SetupCache(tmp_path / "cache").clear() == 0


def test_describe_egress_for_doctor(tmp_path: Path) -> None:
    config = _config(tmp_path, from_repository=True, repositories={"acme/special": {"commands": ["make deps"], "from_repository": False}})
    config.security.egress.setup_hosts = ["pypi.org", "files.pythonhosted.org"]
    lines = describe_egress(config)
    assert lines[0].startswith("setup: .coding-agent/setup.sh from each repository's default branch; limit 600s")
    assert "setup for acme/special: 1 command(s) from the config" in lines
    assert "security.egress.setup_hosts: pypi.org, files.pythonhosted.org" in lines
    assert "security.egress.run_hosts: none (no network)" in lines


def test_bad_allow_list_entry_is_a_config_error_naming_it(tmp_path: Path) -> None:
    from coding_agent.errors import ConfigError

    with pytest.raises((ConfigError, ValueError)) as raised:
        parse_config(
            {
                "task_source": "github",
                "github": {"token": "t", "owner": "acme"},
                "llm": {"provider": "openai", "openai": {"base_url": "http://x", "model": "m", "api_key": "k"}},
                "security": {"egress": {"run_hosts": ["pypi.org/simple"]}},
            }
        )
    assert "run_hosts" in str(raised.value) and "pypi.org/simple" in str(raised.value)


def test_the_proxy_socket_goes_to_the_builtin_server_in_both_forms(tmp_path: Path) -> None:
    """The one the config adds and an operator's own entry named `workspace` (here the CLI
    form) are the workspace server by their config type; any other server gets nothing."""
    from coding_agent.agent.environment import RunEnvironment
    from coding_agent.redaction import Redactor
    from coding_agent.tools.egress_sandbox import EGRESS_SOCKET_ENV

    cli_form = {"mcp_server_name": "workspace", "command": ["coding-agent", "mcp-workspace", "--root", "{workspace}"]}
    other = {"mcp_server_name": "fs", "command": ["npx", "@modelcontextprotocol/server-filesystem", "{workspace}"]}
    minimal = {
        "task_source": "github",
        "github": {"token": "t", "owner": "acme"},
        "llm": {"provider": "openai", "openai": {"base_url": "http://127.0.0.1:9", "model": "m", "api_key": "k"}},
    }
    for servers in ([other], [cli_form, other]):  # the built-in server the config adds; the operator's
        config = parse_config({**minimal, "mcp_servers": servers})
        environment = RunEnvironment(config, cast(Any, None), cast(Any, None), tmp_path, Redactor([]))
        given = {server.mcp_server_name: server.env for server in environment.servers(config.mcp_servers)}
        assert EGRESS_SOCKET_ENV in given["workspace"]
        assert EGRESS_SOCKET_ENV not in given["fs"]

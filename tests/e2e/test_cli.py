"""The CLI as a user meets it: config errors, exit codes, and a third-party MCP server."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from coding_agent.sandbox.replay_model import ReplaySandbox
from tests.support.waiting import wait_for

from ._forge_git import branch_file, task_branch
from .conftest import GitHubForge, llm_section, run_cli, write_config


def _cli(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "coding_agent.cli", *args], cwd=cwd, capture_output=True, text=True, timeout=60
    )


VALID = {
    "task_source": "github",
    "github": {"owner": "acme", "token": "t"},
    "llm": {"provider": "openai", "openai": {"model": "m", "base_url": "http://127.0.0.1:9/v1", "api_key": "k"}},
}


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (lambda c: c["llm"].pop("provider"), "llm.provider: required key is missing"),
        (lambda c: c.update(wrokers=2), "wrokers: unknown key"),
        (lambda c: c.update(workers="two"), "workers: Input should be a valid integer"),
        (lambda c: c["github"].update(token=["not", "a", "string"]), "github.token"),
    ],
    ids=["missing-provider", "unknown-key", "wrong-type", "wrong-type-nested"],
)
def test_config_errors_name_the_key_and_exit_2(tmp_path: Path, change, message: str) -> None:  # type: ignore[no-untyped-def]
    config = yaml.safe_load(yaml.safe_dump(VALID))
    change(config)
    (tmp_path / "config.yaml").write_text(yaml.safe_dump(config))

    result = _cli("run", "--once", cwd=tmp_path)

    assert result.returncode == 2
    assert message in result.stderr
    assert "Traceback" not in result.stderr


def test_missing_config_file_exits_2(tmp_path: Path) -> None:
    result = _cli("run", "--once", "--config", str(tmp_path / "nope.yaml"), cwd=tmp_path)
    assert result.returncode == 2
    assert "cannot read config file" in result.stderr and "nope.yaml" in result.stderr


def test_unreachable_forge_fails_the_preflight_of_run_once(tmp_path: Path) -> None:
    """A forge that cannot be reached: exit 1 with a line naming it, no traceback (SPEC 11)."""
    config = yaml.safe_load(yaml.safe_dump(VALID))
    config["github"]["api_url"] = "http://127.0.0.1:9"
    config["retry"] = {"retries": 0}
    (tmp_path / "config.yaml").write_text(yaml.safe_dump(config))
    result = _cli("run", "--once", cwd=tmp_path)
    assert result.returncode == 1
    assert "preflight failed: forge github http://127.0.0.1:9" in result.stderr
    assert "Traceback" not in result.stderr


@pytest.mark.skipif(shutil.which("mcp-server-filesystem") is None, reason="npm server not installed")
def test_npm_filesystem_server_as_a_configured_tool_server(github_forge: GitHubForge, tmp_path: Path) -> None:
    number = github_forge.open_task("issue", "Use the filesystem server", "Write notes.md.")
    script = {
        "replies": [
            {"tool": "filesystem/list_allowed_directories", "args": {}, "comment": "Checking where I may write."},
            {
                "tool": "filesystem/write_file",
                "args": {"path": "notes.md", "content": "# Notes\nwritten through the npm server\n"},
                "comment": "Writing notes.md with the filesystem server.",
            },
            {"done": "notes.md written."},
        ]
    }
    servers = [{"mcp_server_name": "filesystem", "command": ["mcp-server-filesystem", "{workspace}"]}]
    with ReplaySandbox(script) as model:
        setup = write_config(tmp_path, [github_forge], llm_section(model), mcp_servers=servers)
        result = run_cli(setup, "run", "--once")
        first_request = model.requests[0].body

    assert result.returncode == 0, result.stderr
    offered = {tool["function"]["name"] for tool in first_request["tools"]}
    assert "filesystem__write_file" in offered and "workspace__create" in offered
    assert "coding agent done" in github_forge.labels("issue", number)
    branch = task_branch(github_forge, number)
    assert branch_file(github_forge, branch, "notes.md") == "# Notes\nwritten through the npm server\n"


def test_serve_picks_up_new_tasks_and_stops_on_sigterm(github_forge: GitHubForge, tmp_path: Path) -> None:
    import signal

    from ._steering import spawn_cli
    from .conftest import HELLO_SCRIPT

    with ReplaySandbox(HELLO_SCRIPT) as model:
        setup = write_config(tmp_path, [github_forge], llm_section(model), scheduling={"interval_seconds": 0.2})
        process = spawn_cli(setup.config_path, "serve")
        try:
            number = github_forge.open_task("issue", "Opened while serving", "Please add hello.txt.")
            wait_for(lambda: "coding agent done" in github_forge.labels("issue", number), 60, "the task to end done")
            process.send_signal(signal.SIGTERM)
            process.wait(timeout=30)
        finally:
            if process.poll() is None:
                process.kill()
    assert process.returncode == 0, process.stderr.read() if process.stderr else ""


def test_demo_runs_a_whole_task(tmp_path: Path) -> None:
    result = _cli("demo", "--dir", str(tmp_path / "demo"), cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert "labels: coding agent done" in result.stdout
    assert "(replay model) Done: added `hello.py`" in result.stdout
    assert "Pull request demo/hello-world#2 (draft)" in result.stdout and "files changed: hello.py" in result.stdout
    [workspace] = list((tmp_path / "demo" / "workspaces").iterdir())
    assert "Hello" in (workspace / "hello.py").read_text()

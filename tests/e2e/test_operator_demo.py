"""`coding-agent demo` as a newcomer meets it (SPEC 12): forge tokens exported in the
shell are ignored, nothing is left in the temp directory, and without bubblewrap it says
in its first line that it runs unsandboxed; with `--llm` (a model that runs what it
likes) it refuses to run without bubblewrap unless the config says `security.sandbox:
none` (SPEC 15 "Run unsandboxed by accident")."""

from __future__ import annotations

import os
import secrets
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from coding_agent.sandbox.replay_model import ReplaySandbox


def _demo(tmp_path: Path, env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "coding_agent.cli", "demo", *args],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )


def test_demo_ignores_exported_forge_tokens_and_cleans_up(tmp_path: Path) -> None:
    scratch = tmp_path / "tmp"
    scratch.mkdir()
    env = {**os.environ, "GITHUB_TOKEN": "ghp_not_the_sandbox_token", "GITHUB_BOT_NAME": "someone-else", "TMPDIR": str(scratch)}
    result = _demo(tmp_path, env)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    assert "labels: coding agent done" in result.stdout
    assert "--- comment by @" in result.stdout and "<!-- coding-agent:" not in result.stdout  # the hidden marker
    assert "ghp_not_the_sandbox_token" not in result.stdout + result.stderr
    assert list(scratch.iterdir()) == []


def test_demo_app_runs_the_task_as_a_github_app(tmp_path: Path) -> None:
    """`demo --app` (SPEC 17): the same task worked with installation tokens; the comments
    and the draft PR are by the app's bot, even with a token exported in the shell."""
    env = {**os.environ, "GITHUB_TOKEN": "ghp_not_the_sandbox_token", "GITHUB_APP_PRIVATE_KEY": ""}
    result = _demo(tmp_path, env, "--app")
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    assert "labels: coding agent done" in result.stdout
    authors = {line.split("@", 1)[1] for line in result.stdout.splitlines() if "--- comment by @" in line}
    assert authors == {"coding-agent-demo[bot]"}, result.stdout
    assert "(draft)" in result.stdout
    assert "PRIVATE KEY" not in result.stdout + result.stderr


def _path_without_bwrap(tmp_path: Path) -> dict[str, str]:
    """The environment with a PATH holding the programs the demo needs, but no bwrap."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for program in ("git", "python3", "bash", "sh", "env"):
        found = shutil.which(program)
        assert found is not None, program
        (bin_dir / program).symlink_to(found)
    for helper in Path(shutil.which("git") or "/usr/bin/git").parent.glob("git-*"):
        (bin_dir / helper.name).symlink_to(helper)
    env = {**os.environ, "PATH": str(bin_dir)}
    env.pop("GITHUB_TOKEN", None)
    return env


def test_demo_without_bwrap_runs_unsandboxed_and_says_so_first(tmp_path: Path) -> None:
    result = _demo(tmp_path, _path_without_bwrap(tmp_path))
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    first = result.stdout.splitlines()[0]
    assert "security.sandbox: none" in first and "bwrap" in first
    assert "labels: coding agent done" in result.stdout


@pytest.mark.parametrize("sandbox", ["bwrap (the default)", "none"])
def test_demo_llm_without_bwrap_refuses_unless_the_config_says_sandbox_none(tmp_path: Path, sandbox: str) -> None:
    """The attack: "your model" (a replay model the config names) runs a command reading
    a host file outside the workspace. Without bwrap on PATH the demo refuses before the
    model is asked anything; an operator who set `security.sandbox: none` gets the run,
    told first that it is unsandboxed."""
    secret = secrets.token_hex(12)
    host_file = tmp_path / "host-secret.txt"
    host_file.write_text(secret)
    script = {"replies": [{"tool": "workspace/run", "args": {"command": f"cat {host_file}"}}, {"done": "read it"}]}
    with ReplaySandbox(script) as model:
        config = tmp_path / "config.yaml"
        llm = f"{{provider: openai, function_calling: true, openai: {{base_url: '{model.openai_base_url}', api_key: k, model: m}}}}"
        security = "security: {sandbox: none}\n" if sandbox == "none" else ""
        config.write_text(f"task_source: github\ngithub: {{owner: acme, token: t-{secret[:6]}}}\nllm: {llm}\n{security}")
        result = _demo(tmp_path, _path_without_bwrap(tmp_path), "--llm", "--config", str(config))
        sent = [str(message) for request in model.requests for message in request.body.get("messages", [])]
    output = result.stdout + result.stderr
    if sandbox == "none":
        assert result.returncode == 0, output[-3000:]
        first = result.stdout.splitlines()[0]
        assert "security.sandbox: none" in first and "bwrap" in first and "your model" in first, first
        assert "labels: coding agent done" in result.stdout
        return
    assert result.returncode == 2, output[-3000:]
    assert "needs bubblewrap (bwrap)" in result.stderr and "security.sandbox: none" in result.stderr, output
    assert model.requests == [], "refused before the model was asked anything"
    assert not any(secret in message for message in sent)

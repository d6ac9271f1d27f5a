"""`coding-agent demo` as a newcomer meets it (SPEC 12): forge tokens exported in the
shell are ignored, nothing is left in the temp directory, and without bubblewrap it says
in its first line that it runs unsandboxed."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path


def _demo(tmp_path: Path, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "coding_agent.cli", "demo"],
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


def test_demo_without_bwrap_runs_unsandboxed_and_says_so_first(tmp_path: Path) -> None:
    # A PATH holding the programs the demo needs, but no bwrap.
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
    result = _demo(tmp_path, env)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    first = result.stdout.splitlines()[0]
    assert "security.sandbox: none" in first and "bwrap" in first
    assert "labels: coding agent done" in result.stdout

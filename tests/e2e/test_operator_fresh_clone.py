"""A newcomer's first commands on a fresh clone (issue 14): `./dev setup-demo` in a plain
shell, no virtualenv active, the checkout under the temp directory (which the sandbox
hides), forge tokens exported (the demo must ignore them)."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parents[2]


def _plain_environment(tmp_path: Path) -> dict[str, str]:
    """A login-shell-like environment: system PATH only, no VIRTUAL_ENV, tokens exported."""
    keep = {name: os.environ[name] for name in ("HOME", "LANG", "PIP_INDEX_URL", "PIP_CACHE_DIR") if name in os.environ}
    path = [part for part in os.environ.get("PATH", "").split(os.pathsep) if ".venv" not in part and "venv/bin" not in part]
    return {
        **keep,
        "PATH": os.pathsep.join(path) or "/usr/bin:/bin",
        "GITHUB_TOKEN": "ghp_exported_by_the_user_not_for_the_demo",
        "GITLAB_TOKEN": "glpat-exported-by-the-user",
        "TMPDIR": str(tmp_path),
    }


@pytest.mark.long
@pytest.mark.fresh_clone
def test_fresh_clone_sets_up_and_runs_the_demo(tmp_path: Path) -> None:
    if not (REPO_ROOT / ".git").exists() or shutil.which("git") is None:
        pytest.skip("not a git checkout: nothing to clone")
    checkout = tmp_path / "checkout"
    subprocess.run(["git", "clone", "--quiet", str(REPO_ROOT), str(checkout)], check=True, timeout=120)
    completed = subprocess.run(
        ["./dev", "setup-demo"],
        cwd=checkout,
        env=_plain_environment(tmp_path),
        capture_output=True,
        text=True,
        timeout=900,
        check=False,
    )
    output = completed.stdout + completed.stderr
    assert completed.returncode == 0, output[-4000:]
    assert (checkout / ".venv" / "bin" / "coding-agent").exists()
    assert "labels: coding agent done" in completed.stdout
    assert "files changed: hello.py" in completed.stdout
    assert "ghp_exported_by_the_user" not in output
    # The demo cleans up after itself: nothing of it is left in the temp directory.
    assert not [path.name for path in tmp_path.iterdir() if path.name.startswith("coding-agent-demo-")]


def test_dev_without_a_command_prints_its_usage() -> None:
    completed = subprocess.run([str(REPO_ROOT / "dev")], capture_output=True, text=True, timeout=30, check=False)
    assert completed.returncode == 2
    assert "./dev setup-demo" in completed.stderr and "./dev test" in completed.stderr


def test_ci_runs_exactly_the_readme_test_command() -> None:
    readme = (REPO_ROOT / "README.md").read_text(encoding="utf-8")
    ci = (REPO_ROOT / ".ci" / "run").read_text(encoding="utf-8")
    first_block = readme.split("```bash", 1)[1].split("```", 1)[0]
    commands = [line.split("#", 1)[0].strip() for line in first_block.strip().splitlines()]
    assert commands[:2] == ["./dev setup-demo", "./dev test"]
    assert [line for line in ci.splitlines() if line.strip() and not line.startswith("#")][-1].strip() in (
        "./dev test",
        "exec ./dev test",
    )

"""The code passes its linter and its type checker, so `./dev test` (and CI) keeps it so.

Runs `ruff check` and `mypy` on src/ in child processes with the settings in pyproject.toml
(`[tool.ruff]`, `[tool.mypy]`: strict on `domain`, `agent`, `runtime` and `store`, the rest
checked with mypy's defaults). A failure prints the tool's own findings.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def run(*args: str) -> subprocess.CompletedProcess[str]:
    """A tool of this venv (`python -m ...`), run from the repository root so it reads pyproject.toml."""
    return subprocess.run([sys.executable, "-m", *args], cwd=ROOT, capture_output=True, text=True, timeout=600)


def test_ruff_finds_nothing_in_src() -> None:
    result = run("ruff", "check", "--no-cache", "src")
    assert result.returncode == 0, result.stdout + result.stderr


@pytest.mark.long
def test_mypy_finds_nothing_in_src() -> None:
    """The whole package type-checks; `domain`, `agent`, `runtime` and `store` strictly.

    The cache (.mypy_cache, ignored by git) makes a second run take seconds."""
    result = run("mypy")
    assert result.returncode == 0, result.stdout + result.stderr
    assert "Success: no issues found" in result.stdout

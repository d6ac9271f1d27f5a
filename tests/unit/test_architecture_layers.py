"""The floor plan holds: every import between top-level packages points down.

Runs import-linter's `lint-imports` on the contracts in pyproject.toml (`[tool.importlinter]`:
the layers, no cycles, production code never importing the sandboxes, the package never
importing `tests`, a plain `domain`), in a child process so that what this test session
already imported does not matter. The other tests prove the checks bite: a copy of the
package with one upward import, or one import of `tests.support`, breaks its contract.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import coding_agent

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = Path(coding_agent.__file__).resolve().parent


def lint_imports(python_path: Path, *contracts: str) -> subprocess.CompletedProcess[str]:
    """`lint-imports` with the repository's contracts, finding `coding_agent` under `python_path`."""
    args = [sys.executable, "-c", "from importlinter.cli import lint_imports_command; lint_imports_command()"]
    args += ["--config", str(ROOT / "pyproject.toml"), "--no-cache", "--no-logo"]
    for contract in contracts:
        args += ["--contract", contract]
    env = {**os.environ, "PYTHONPATH": str(python_path)}
    return subprocess.run(args, cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)


def test_every_contract_is_kept() -> None:
    result = lint_imports(PACKAGE.parent)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "0 broken" in result.stdout


def test_an_upward_import_breaks_the_layers(tmp_path: Path) -> None:
    copy = tmp_path / "coding_agent"
    shutil.copytree(PACKAGE, copy, ignore=shutil.ignore_patterns("__pycache__"))
    tasks = copy / "domain" / "tasks.py"
    tasks.write_text(tasks.read_text() + "\nfrom coding_agent.runtime.service import AgentService  # upward\n")

    result = lint_imports(tmp_path, "floors")

    assert result.returncode == 1, result.stdout + result.stderr
    assert "coding_agent.domain is not allowed to import coding_agent.runtime" in result.stdout
    assert "coding_agent.domain.tasks -> coding_agent.runtime.service" in result.stdout


def test_an_import_of_the_test_support_breaks_the_product(tmp_path: Path) -> None:
    """`tests.support` is not in the wheel: a sandbox module the demo runs must not need it."""
    copy = tmp_path / "coding_agent"
    shutil.copytree(PACKAGE, copy, ignore=shutil.ignore_patterns("__pycache__"))
    faults = copy / "sandbox" / "faults.py"
    faults.write_text(faults.read_text() + "\nfrom tests.support.waiting import wait_for  # test-only\n")

    result = lint_imports(tmp_path, "no-tests-in-product")

    assert result.returncode == 1, result.stdout + result.stderr
    assert "coding_agent.sandbox.faults -> tests" in result.stdout

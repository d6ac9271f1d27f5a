"""Reading what a run delivered straight from the sandbox forge's bare repository.

A run's clone is deleted when the run ends (`workspace.keep_finished: false`), so the
e2e tests look at the branch the run pushed, as a reviewer of the PR/MR would.
"""

from __future__ import annotations

import subprocess
from typing import Any

from .conftest import REPO, ForgeUnderTest

__all__ = ["task_branch", "branch_file", "branch_log"]


def _bare(forge: ForgeUnderTest) -> str:
    state: Any = forge.sandbox.state  # type: ignore[attr-defined]
    return str(state.git_dir(REPO))


def task_branch(forge: ForgeUnderTest, number: int) -> str:
    """The one `coding-agent/<number>-...` branch the agent pushed for issue `number`."""
    state: Any = forge.sandbox.state  # type: ignore[attr-defined]
    [branch] = [name for name in state.branches(REPO) if name.startswith(f"coding-agent/{number}-")]
    return branch


def branch_file(forge: ForgeUnderTest, ref: str, path: str) -> str | None:
    """`path` as committed at `ref` (a branch or a commit) on the forge; None when absent."""
    shown = subprocess.run(
        ["git", "--git-dir", _bare(forge), "show", f"{ref}:{path}"], capture_output=True, text=True, check=False
    )
    return shown.stdout if shown.returncode == 0 else None


def branch_log(forge: ForgeUnderTest, ref: str, count: int = 10) -> list[str]:
    """The subjects of the newest `count` commits of `ref` on the forge, newest first."""
    log = subprocess.run(
        ["git", "--git-dir", _bare(forge), "log", f"-{count}", "--format=%s", ref],
        capture_output=True,
        text=True,
        check=True,
    )
    return log.stdout.splitlines()

"""A work tree shaped like a run's checkout, for tests and benchmarks: committed files,
the git directory outside the work tree (where `tools.host_git.git_dir_for` says the
agent keeps it), and no `.git` file left in the work tree (SPEC 7)."""

from __future__ import annotations

import subprocess
from pathlib import Path

__all__ = ["checkout_like"]


def checkout_like(path: Path, git_dir: Path, files: dict[str, str]) -> Path:
    """Create `path` with `files` committed in one commit whose repository is `git_dir`."""
    path.mkdir(parents=True)
    git_dir.parent.mkdir(parents=True, exist_ok=True)
    for name, text in files.items():
        (path / name).write_text(text)
    identity = ["-c", "user.name=t", "-c", "user.email=t@t"]
    for args in (["init", "-q", "--separate-git-dir", str(git_dir)], ["add", "."], [*identity, "commit", "-qm", "init"]):
        subprocess.run(["git", *args], cwd=path, check=True, capture_output=True)
    (path / ".git").unlink()
    return path

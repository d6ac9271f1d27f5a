"""Real git repositories for the sandbox forges: bare repositories on disk.

`GitRepoStore` keeps them in a temporary directory, named like the forge names them
(`owner/repo`, GitLab's nested groups too), creates their content without a work tree
(`git fast-import`), and holds the tests' two controls beyond the forge's permissions:
`refuse_pushes` makes every push answer 403, and `race_next_push` lands someone else's
commit on a branch just before the agent's next push, so a non-fast-forward rejection
happens deterministically. `git_http.py` serves them.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import tempfile
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

__all__ = ["Files", "GitRepoStore", "GitRequestRecord", "sandbox_git_env"]

_REPO_NAME = re.compile(r"^[A-Za-z0-9_.-]+(?:/[A-Za-z0-9_.-]+)+$")
_SANDBOX_IDENTITY = {
    "GIT_AUTHOR_NAME": "Sandbox Forge",
    "GIT_AUTHOR_EMAIL": "sandbox@example.test",
    "GIT_COMMITTER_NAME": "Sandbox Forge",
    "GIT_COMMITTER_EMAIL": "sandbox@example.test",
}

Files = Mapping[str, str | bytes]


@dataclass(frozen=True)
class GitRequestRecord:
    """One git HTTP request as answered, for tests that count clones and pushes."""

    method: str
    repo: str
    service: str
    status: int
    user: str | None


def sandbox_git_env(home: Path) -> dict[str, str]:
    """The sandbox's own git runs: no operator config, a fixed identity, no prompts."""
    return {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "HOME": str(home),
        "GIT_CONFIG_NOSYSTEM": "1",
        "GIT_CONFIG_GLOBAL": os.devnull,
        "GIT_TERMINAL_PROMPT": "0",
        "LC_ALL": "C",
        **_SANDBOX_IDENTITY,
    }


def _fast_import_stream(ref: str, parent: str | None, files: Files, message: str, when: int) -> bytes:
    """A `git fast-import` stream of one commit on `ref` (on top of `parent`) holding `files`."""
    out = bytearray()
    data = message.encode()
    out += f"commit {ref}\n".encode()
    committer = f"{_SANDBOX_IDENTITY['GIT_COMMITTER_NAME']} <{_SANDBOX_IDENTITY['GIT_COMMITTER_EMAIL']}>"
    out += f"committer {committer} {when} +0000\n".encode()
    out += f"data {len(data)}\n".encode() + data + b"\n"
    if parent is not None:
        out += f"from {parent}\n".encode()
    for path, content in files.items():
        if not path or path.startswith("/") or ".." in path.split("/") or "\n" in path:
            raise ValueError(f"not a repository-relative file path: {path!r}")
        blob = content.encode() if isinstance(content, str) else bytes(content)
        out += f"M 100644 inline {path}\n".encode()
        out += f"data {len(blob)}\n".encode() + blob + b"\n"
    return bytes(out)


class GitRepoStore:
    """Bare repositories on disk, named like the forge names them (`owner/repo`).

    The directory is created on first use and removed by `close()`. Every method is
    thread-safe: tests call it from their thread while the server answers git requests
    from its own.
    """

    def __init__(self) -> None:
        self._lock = threading.RLock()
        self._root: Path | None = None
        self._races: dict[tuple[str, str], Files] = {}
        self.refuse_pushes = False
        self.requests: list[GitRequestRecord] = []

    @property
    def root(self) -> Path:
        with self._lock:
            if self._root is None:
                self._root = Path(tempfile.mkdtemp(prefix="sandbox-git-"))
            return self._root

    def path(self, name: str) -> Path:
        """The bare repository's directory (it may not exist yet)."""
        if not _REPO_NAME.match(name) or ".." in name.split("/"):
            raise ValueError(f"not a repository name: {name!r}")
        return self.root / f"{name}.git"

    def exists(self, name: str) -> bool:
        return (self.path(name) / "HEAD").is_file()

    def _git(self, name: str, *args: str, stdin: bytes | None = None) -> str:
        result = subprocess.run(
            ["git", "--git-dir", str(self.path(name)), *args],
            input=stdin,
            capture_output=True,
            env=sandbox_git_env(self.root),
            check=False,
        )
        if result.returncode != 0:
            detail = result.stderr.decode(errors="replace").strip()
            raise RuntimeError(f"git {args[0]} in sandbox repository {name} failed: {detail}")
        return result.stdout.decode(errors="replace")

    def init(self, name: str, files: Files | None = None, branch: str = "main", message: str = "Initial commit") -> str:
        """Create `name` with one commit on `branch` holding `files` (default: a README).

        Returns the commit's sha. Raises ValueError if the repository exists already.
        """
        with self._lock:
            path = self.path(name)
            if self.exists(name):
                raise ValueError(f"sandbox repository {name} exists already")
            path.mkdir(parents=True, exist_ok=True)
            self._git(name, "init", "--quiet", "--bare", f"--initial-branch={branch}")
            content = files if files is not None else {"README.md": f"# {name.rsplit('/', 1)[-1]}\n"}
            return self._commit(name, branch, content, message, parent=None)

    def ensure(self, name: str, branch: str = "main") -> Path:
        """The repository, created with a README commit on `branch` when it does not exist."""
        with self._lock:
            if not self.exists(name):
                self.init(name, branch=branch)
            return self.path(name)

    def _commit(self, name: str, branch: str, files: Files, message: str, parent: str | None) -> str:
        ref = f"refs/heads/{branch}"
        self._git(name, "fast-import", "--quiet", stdin=_fast_import_stream(ref, parent, files, message, int(time.time())))
        return self._git(name, "rev-parse", ref).strip()

    def commit_files(self, name: str, branch: str, files: Files, message: str = "Update files") -> str:
        """Add one commit on top of `branch` (created from nothing if absent); returns its sha."""
        with self._lock:
            parent = self.branches(name).get(branch)
            return self._commit(name, branch, files, message, parent=parent)

    def branches(self, name: str) -> dict[str, str]:
        """Branch name -> commit sha; empty for a repository that does not exist."""
        with self._lock:
            if not self.exists(name):
                return {}
            listing = self._git(name, "for-each-ref", "--format=%(refname:strip=2) %(objectname)", "refs/heads")
        return dict(line.split(" ", 1) for line in listing.splitlines() if line)

    def create_branch(self, name: str, branch: str, start: str) -> str:
        """Point a new `branch` at `start` (a branch name or sha); returns the sha."""
        with self._lock:
            sha = self._git(name, "rev-parse", "--verify", f"{start}^{{commit}}").strip()
            self._git(name, "update-ref", f"refs/heads/{branch}", sha, "")
            return sha

    def point_head(self, name: str, branch: str) -> None:
        """Make HEAD name `branch`, which need not exist (a HEAD whose branch was deleted)."""
        with self._lock:
            self._git(name, "symbolic-ref", "HEAD", f"refs/heads/{branch}")

    def has_commit(self, name: str, ref: str) -> bool:
        """Whether `ref` (a sha or a branch) names a commit of `name`."""
        result = subprocess.run(
            ["git", "--git-dir", str(self.path(name)), "rev-parse", "--verify", "--quiet", f"{ref}^{{commit}}"],
            capture_output=True,
            env=sandbox_git_env(self.root),
            check=False,
        )
        return result.returncode == 0

    def read_file(self, name: str, ref: str, path: str) -> bytes | None:
        """The file at `path` in `ref`, or None when it is not there."""
        result = subprocess.run(
            ["git", "--git-dir", str(self.path(name)), "cat-file", "blob", f"{ref}:{path}"],
            capture_output=True,
            env=sandbox_git_env(self.root),
            check=False,
        )
        return result.stdout if result.returncode == 0 else None

    def changed_files(self, name: str, base: str, head: str) -> list[str]:
        """Paths `head` changed since it forked from `base` (what a PR's "Files changed" lists)."""
        return self._git(name, "diff", "--name-only", f"{base}...{head}").split()

    def log(self, name: str, ref: str) -> list[str]:
        """Full commit messages reachable from `ref`, newest first."""
        out = self._git(name, "log", "--format=%B%x00", ref)
        return [message.strip() for message in out.split("\x00") if message.strip()]

    def race_next_push(self, name: str, branch: str, files: Files | None = None) -> None:
        """Before the next push to `name`, commit `files` on `branch` as somebody else.

        Makes "the branch moved on the forge while the agent worked" deterministic: that
        push is then rejected as non-fast-forward by git itself.
        """
        with self._lock:
            self._races[(name, branch)] = files or {"RACE.md": "pushed by someone else\n"}

    def before_push(self, name: str) -> None:
        """Called by the server when a push starts: land any commit armed by `race_next_push`."""
        with self._lock:
            armed = [(key, files) for key, files in self._races.items() if key[0] == name]
            for key, files in armed:
                del self._races[key]
                self.commit_files(name, key[1], files, "A commit pushed by someone else")

    def record(self, entry: GitRequestRecord) -> None:
        with self._lock:
            self.requests.append(entry)

    def close(self) -> None:
        with self._lock:
            if self._root is not None:
                shutil.rmtree(self._root, ignore_errors=True)
                self._root = None

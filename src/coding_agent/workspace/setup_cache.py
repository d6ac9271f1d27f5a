"""The setup cache (SPEC 7.1, `setup.cache`): what a setup left in the workspace, reused.

An entry is a copied directory outside every workspace: the paths the setup created
(found with git, so `.venv/`, `node_modules/`, `.deps/` whatever the tool), plus the
setup's own result. A warm start copies them back instead of running the setup; a copy
is a plain file copy (hard links would let one run's edits change the next run's files).

What a run may do with it (SPEC 15): any run reads the entry of its key, but only a run
whose workspace holds a trusted tree (`CacheScope.trusted`) fills one, so a pull request
by someone without write access can use a trusted entry and never write or poison one.
The key names the repository on its forge (`CacheScope.repository`: the forge's address
and the repository's id, not only its name), the script, and the content of everything
in the workspace the script reads that decides its result: every lockfile at any depth
and every file or directory the script names. Copies in both directions go through
`confined_copy.py`: a pull request may turn any directory into a symlink to the host's
files, and no copy ever follows one.

Entries are written to a temporary directory and renamed into place, so a crash mid-way
never leaves a half entry that a later run would trust.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import posixpath
import shlex
import shutil
import stat
import tempfile
from collections.abc import Iterable
from dataclasses import asdict, dataclass
from pathlib import Path

from coding_agent.tools.paths import ConfinedRoot, PathOutsideWorkspace
from coding_agent.workspace.confined_copy import copy_between, remove_under

__all__ = ["CacheScope", "CachedSetup", "SetupCache", "LOCKFILES", "key_paths", "remove_quietly"]

log = logging.getLogger(__name__)

# Files whose content decides what a setup installs, at any depth (monorepos).
LOCKFILES = frozenset((
    "requirements.txt", "requirements-dev.txt", "requirements-test.txt", "constraints.txt",
    "pyproject.toml", "poetry.lock", "Pipfile.lock", "uv.lock", "pdm.lock", "setup.cfg", "setup.py",
    "package.json", "package-lock.json", "yarn.lock", "pnpm-lock.yaml", "bun.lockb",
    "go.mod", "go.sum", "Cargo.toml", "Cargo.lock", "Gemfile", "Gemfile.lock", "composer.json", "composer.lock",
    "mix.exs", "mix.lock",
))  # fmt: skip
_CHUNK = 1024 * 1024
_SHELL_OPERATORS = frozenset(";&|()<>")


@dataclass(frozen=True)
class CacheScope:
    """Which entries a run sees, and whether it may fill one.

    `repository`: the repository as no other repository on any forge is named (the
    forge's address and the repository's id). `trusted`: the run's workspace holds a
    tree only people with write access wrote (the default branch, or a head they pushed).
    """

    repository: str
    trusted: bool


@dataclass(frozen=True)
class CachedSetup:
    """The result of the setup that filled an entry, shown again on a warm start."""

    key: str
    paths: list[str]
    exit_code: int | None
    output_tail: str


def _script_names(script: str) -> set[str]:
    """Workspace-relative paths the script names: its words, `./` and `NAME=` stripped.

    A word is a candidate, not a claim: only the ones that are files or directories of
    the workspace count. `.` as a command (the shell's `source`) names nothing; `.` as an
    argument (`pip install .`) names the whole tree.
    """
    names: set[str] = set()
    for line in script.splitlines():
        lexer = shlex.shlex(line, posix=True, punctuation_chars=True)
        lexer.whitespace_split = True
        try:
            words = list(lexer)
        except ValueError:  # an unbalanced quote: fall back to plain words
            words = line.split()
        at_command = True
        for word in words:
            if set(word) <= _SHELL_OPERATORS:
                at_command = True
                continue
            if not (at_command and word == "."):
                names.update(part for part in word.split("=") if part)
            at_command = False
    normal = {posixpath.normpath(name) for name in names if not name.startswith(("-", "/", "~", "$"))}
    return {name for name in normal if name != ".." and not name.startswith("../")}


def key_paths(script: str, files: Iterable[str]) -> list[str]:
    """The workspace files (as git lists them) whose content goes into the key."""
    named = _script_names(script)
    whole_tree = "." in named
    chosen: set[str] = set()
    for path in files:
        if whole_tree or posixpath.basename(path) in LOCKFILES or path in named:
            chosen.add(path)
            continue
        parent = posixpath.dirname(path)
        while parent and parent not in named:
            parent = posixpath.dirname(parent)
        if parent:
            chosen.add(path)
    return sorted(chosen)


def _fingerprint(root: ConfinedRoot, relative: str) -> bytes:
    """What `relative` holds, without following a link: content, link target or kind."""
    try:
        with root.locate(relative, follow_last=False, refuse_links=True) as found:
            status = root.lstat(found)
            if stat.S_ISLNK(status.st_mode):
                return b"link " + os.fsencode(os.readlink(found.name, dir_fd=found.dir_fd))
            if not stat.S_ISREG(status.st_mode):
                return f"kind {stat.S_IFMT(status.st_mode):o}".encode()
            digest = hashlib.sha256(b"executable" if status.st_mode & 0o111 else b"file")
            with os.fdopen(root.open_read(found), "rb") as handle:
                while chunk := handle.read(_CHUNK):
                    digest.update(chunk)
            return digest.digest()
    except FileNotFoundError:
        return b"missing"
    except (OSError, PathOutsideWorkspace) as error:
        return f"unreadable {error.__class__.__name__}".encode()


class SetupCache:
    """Entries under `base_dir`, one directory per key."""

    def __init__(self, base_dir: Path) -> None:
        self.base_dir = Path(base_dir)

    def key(self, scope: CacheScope, script: str, workspace: Path, files: Iterable[str]) -> str:
        """sha256 over the repository's identity, the script, and each of `key_paths`'s
        path and content as the workspace holds it (`files`: its files as git lists them)."""
        root = ConfinedRoot(workspace)
        digest = hashlib.sha256()
        for part in (scope.repository, script):
            digest.update(hashlib.sha256(part.encode("utf-8", "surrogateescape")).digest())
        for relative in key_paths(script, files):
            digest.update(hashlib.sha256(os.fsencode(relative)).digest())
            digest.update(hashlib.sha256(_fingerprint(root, relative)).digest())
        return digest.hexdigest()

    def _entry(self, key: str) -> Path:
        return self.base_dir / key[:2] / key

    def lookup(self, key: str) -> CachedSetup | None:
        meta = self._entry(key) / "setup.json"
        try:
            entry = CachedSetup(**json.loads(meta.read_text(encoding="utf-8")))
        except (OSError, ValueError, TypeError):
            return None
        if entry.key != key or not isinstance(entry.paths, list) or not all(isinstance(p, str) for p in entry.paths):
            return None
        return entry

    def restore(self, entry: CachedSetup, workspace: Path) -> bool:
        """Copy the entry's paths into `workspace` (replacing what is there under those names).

        False, with the workspace's part of it undone, when a path would leave the
        workspace or go through a symlink the workspace holds: then the setup runs instead.
        """
        files, root = ConfinedRoot(self._entry(entry.key) / "files"), ConfinedRoot(workspace)
        done: list[str] = []
        for relative in entry.paths:
            try:
                copy_between(files, root, relative)
            except (OSError, PathOutsideWorkspace) as error:
                log.warning("setup cache: entry %s not restored: %s", entry.key[:12], _reason(error))
                for restored in done:
                    remove_quietly(root, restored)
                return False
            done.append(relative)
        return True

    def store(self, key: str, workspace: Path, paths: list[str], exit_code: int | None, output_tail: str) -> bool:
        """Copy `paths` (relative to `workspace`) into a new entry; False when it could not.

        Only a run whose workspace holds a trusted tree calls this (`CacheScope.trusted`).
        """
        self.base_dir.mkdir(parents=True, exist_ok=True)
        staging = Path(tempfile.mkdtemp(prefix=".staging-", dir=self.base_dir))
        try:
            (staging / "files").mkdir()
            files, root = ConfinedRoot(staging / "files"), ConfinedRoot(workspace)
            for relative in paths:
                try:
                    copy_between(root, files, relative)
                except FileNotFoundError:
                    continue  # gone since git listed it
            entry = CachedSetup(key, paths, exit_code, output_tail)
            (staging / "setup.json").write_text(json.dumps(asdict(entry)), encoding="utf-8")
            final = self._entry(key)
            final.parent.mkdir(parents=True, exist_ok=True)
            if final.exists():
                shutil.rmtree(final)
            os.replace(staging, final)
            return True
        except (OSError, PathOutsideWorkspace) as error:
            log.warning("setup cache: could not store entry %s (%s)", key[:12], _reason(error))
            shutil.rmtree(staging, ignore_errors=True)
            return False

    def clear(self) -> int:
        """Remove every entry; return how many there were."""
        if not self.base_dir.is_dir():
            return 0
        count = sum(1 for _ in self.base_dir.glob("*/*/setup.json"))
        for child in self.base_dir.iterdir():
            if child.is_dir() and not child.is_symlink():
                shutil.rmtree(child, ignore_errors=True)
            else:
                child.unlink(missing_ok=True)
        return count


def remove_quietly(root: ConfinedRoot, relative: str) -> None:
    """Remove `relative` under `root` without following a link; a refusal is only logged."""
    try:
        remove_under(root, relative)
    except (OSError, PathOutsideWorkspace) as error:
        log.warning("setup cache: %s not removed: %s", relative, _reason(error))


def _reason(error: OSError | PathOutsideWorkspace) -> str:
    if isinstance(error, OSError):
        return f"{error.__class__.__name__}: {error.strerror or error}"
    return str(error)

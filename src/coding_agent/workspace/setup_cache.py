"""The setup cache (SPEC 7.1, `setup.cache`): what a setup left in the workspace, reused.

Keyed by repository, the setup script and the content of the lockfiles in the
workspace, so a change to any of them runs the setup again. An entry is a copied
directory outside every workspace: the paths the setup created (found with git, so
`.venv/`, `node_modules/`, `.deps/` whatever the tool), plus the setup's own result.
A warm start copies them back instead of running the setup; a copy is a plain file
copy (hard links would let one run's edits change the next run's files).

Entries are written to a temporary directory and renamed into place, so a crash mid-way
never leaves a half entry that a later run would trust.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import shutil
import tempfile
from dataclasses import asdict, dataclass
from pathlib import Path

__all__ = ["CachedSetup", "SetupCache", "LOCKFILES"]

log = logging.getLogger(__name__)

# Files whose content decides what a setup installs; searched at the top level and one
# directory down (monorepos with a package per directory).
LOCKFILES = (
    "requirements.txt", "requirements-dev.txt", "requirements-test.txt", "constraints.txt",
    "pyproject.toml", "poetry.lock", "Pipfile.lock", "uv.lock", "pdm.lock", "setup.cfg", "setup.py",
    "package.json", "package-lock.json", "yarn.lock", "pnpm-lock.yaml", "bun.lockb",
    "go.sum", "Cargo.lock", "Gemfile.lock", "composer.lock", "mix.lock",
)  # fmt: skip
_LOCKFILE_MAX_BYTES = 16 * 1024 * 1024


@dataclass(frozen=True)
class CachedSetup:
    """The result of the setup that filled an entry, shown again on a warm start."""

    key: str
    paths: list[str]
    exit_code: int | None
    output_tail: str


def _lockfiles(workspace: Path) -> list[Path]:
    found: list[Path] = []
    for directory in [workspace, *sorted(p for p in workspace.iterdir() if p.is_dir() and p.name != ".git")]:
        for name in LOCKFILES:
            candidate = directory / name
            if candidate.is_file() and not candidate.is_symlink():
                found.append(candidate)
    return found


class SetupCache:
    """Entries under `base_dir`, one directory per key."""

    def __init__(self, base_dir: Path) -> None:
        self.base_dir = Path(base_dir)

    def key(self, project: str, script: str, workspace: Path) -> str:
        """sha256 over the repository, the script and every lockfile's path and content."""
        digest = hashlib.sha256()
        for part in (project, script):
            digest.update(part.encode() + b"\0")
        for path in _lockfiles(workspace):
            if path.stat().st_size > _LOCKFILE_MAX_BYTES:
                continue
            digest.update(str(path.relative_to(workspace)).encode() + b"\0")
            digest.update(hashlib.sha256(path.read_bytes()).digest())
        return digest.hexdigest()

    def _entry(self, key: str) -> Path:
        return self.base_dir / key[:2] / key

    def lookup(self, key: str) -> CachedSetup | None:
        meta = self._entry(key) / "setup.json"
        try:
            data = json.loads(meta.read_text(encoding="utf-8"))
            return CachedSetup(**data)
        except (OSError, ValueError, TypeError):
            return None

    def restore(self, entry: CachedSetup, workspace: Path) -> None:
        """Copy the entry's paths into `workspace` (replacing what is there under those names)."""
        files = self._entry(entry.key) / "files"
        for relative in entry.paths:
            source, target = files / relative, workspace / relative
            if target.is_dir() and not target.is_symlink():
                shutil.rmtree(target)
            elif target.exists() or target.is_symlink():
                target.unlink()
            target.parent.mkdir(parents=True, exist_ok=True)
            if source.is_dir() and not source.is_symlink():
                shutil.copytree(source, target, symlinks=True)
            else:
                shutil.copy2(source, target, follow_symlinks=False)

    def store(self, key: str, workspace: Path, paths: list[str], exit_code: int | None, output_tail: str) -> bool:
        """Copy `paths` (relative to `workspace`) into a new entry; False when it could not."""
        self.base_dir.mkdir(parents=True, exist_ok=True)
        staging = Path(tempfile.mkdtemp(prefix=".staging-", dir=self.base_dir))
        try:
            for relative in paths:
                source, target = workspace / relative, staging / "files" / relative
                target.parent.mkdir(parents=True, exist_ok=True)
                if source.is_dir() and not source.is_symlink():
                    shutil.copytree(source, target, symlinks=True)
                elif source.exists() or source.is_symlink():
                    shutil.copy2(source, target, follow_symlinks=False)
            entry = CachedSetup(key, paths, exit_code, output_tail)
            (staging / "setup.json").write_text(json.dumps(asdict(entry)), encoding="utf-8")
            final = self._entry(key)
            final.parent.mkdir(parents=True, exist_ok=True)
            if final.exists():
                shutil.rmtree(final)
            os.replace(staging, final)
            return True
        except OSError as error:
            log.warning("setup cache: could not store entry %s (%s)", key[:12], error)
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

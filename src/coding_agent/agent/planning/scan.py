"""The host's placeholder scan for verification (SPEC 10.1): lines the run added, as
`git diff` shows them (untracked files counted whole), that look unfinished.

The model is told what the host found, so a weak model cannot declare victory over a
`TODO` it left behind without at least being shown it.
"""

from __future__ import annotations

import logging
import re
from dataclasses import dataclass
from pathlib import Path

from coding_agent.errors import AgentError
from coding_agent.workspace.git import Git

__all__ = ["DiffScan", "scan_workspace", "placeholder_in"]

log = logging.getLogger(__name__)

_PLACEHOLDER = re.compile(r"\bTODO\b|\bFIXME\b|\.\.\.|^\s*pass\s*$|\bNotImplementedError\b")
_HUNK = re.compile(r"^@@ -\d+(?:,\d+)? \+(\d+)(?:,\d+)? @@")
_MAX_FILE_BYTES = 1_000_000
_MAX_LOCATIONS = 50


@dataclass(frozen=True)
class DiffScan:
    changed: list[str]
    placeholders: list[str]  # "path:line"


def placeholder_in(line: str) -> bool:
    return _PLACEHOLDER.search(line) is not None


def _scan_diff(text: str, found: list[str]) -> list[str]:
    changed: list[str] = []
    path = ""
    number = 0
    for line in text.splitlines():
        if line.startswith("+++ "):
            path = line[6:] if line.startswith("+++ b/") else ""
            if path:
                changed.append(path)
        elif (hunk := _HUNK.match(line)) is not None:
            number = int(hunk.group(1))
        elif line.startswith("+") and path:
            if placeholder_in(line[1:]):
                found.append(f"{path}:{number}")
            number += 1
        elif not line.startswith("-"):
            number += 1
    return changed


async def scan_workspace(workspace: Path, timeout: float) -> DiffScan:
    """Changed files and placeholder locations; an unreadable workspace scans as empty."""
    git = Git(timeout=timeout)
    found: list[str] = []
    try:
        diff = await git.run(workspace, "diff", "HEAD", "--unified=0", "--no-color", "--no-ext-diff")
        changed = _scan_diff(diff.stdout, found)
        untracked = await git.run(workspace, "ls-files", "--others", "--exclude-standard", "-z")
    except AgentError as error:
        log.warning("verification scan of %s failed: %s", workspace, error)
        return DiffScan([], [])
    for name in filter(None, untracked.stdout.split("\0")):
        changed.append(name)
        path = workspace / name
        try:
            if path.is_symlink() or path.stat().st_size > _MAX_FILE_BYTES:
                continue
            lines = path.read_text(encoding="utf-8", errors="replace").splitlines()
        except OSError:
            continue
        found += [f"{name}:{number}" for number, line in enumerate(lines, 1) if placeholder_in(line)]
    return DiffScan(sorted(set(changed)), found[:_MAX_LOCATIONS])

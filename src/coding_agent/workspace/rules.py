"""Repository rules: the instruction files a repository keeps for coding agents (SPEC 9.2).

`AGENTS.md`, `CLAUDE.md` and `.github/copilot-instructions.md` are read from the clone
and put into the system prompt, each cut to `workspace.rules_max_bytes` so a huge file
cannot crowd out the task. A rule file that is a symlink leading out of the clone is
ignored: the repository's content must not make the agent read the host's files.
"""

from __future__ import annotations

import logging
import os
from pathlib import Path

from coding_agent.tools.paths import ConfinedRoot, PathOutsideWorkspace

__all__ = ["RULE_FILES", "read_repository_rules"]

log = logging.getLogger(__name__)

RULE_FILES: tuple[str, ...] = ("AGENTS.md", "CLAUDE.md", ".github/copilot-instructions.md")


def read_repository_rules(root: Path, max_bytes: int) -> dict[str, str]:
    """Rule file path -> its text (cut to `max_bytes`), for the rule files the clone has."""
    rules: dict[str, str] = {}
    if max_bytes <= 0:
        return rules
    confined = ConfinedRoot(root)
    for name in RULE_FILES:
        # Descriptor-relative and without following links out (a continued run reads
        # them after the model has had the workspace).
        try:
            with confined.locate(name) as located, os.fdopen(confined.open_read(located), "rb") as handle:
                data = handle.read(max_bytes + 1)
                size = os.fstat(handle.fileno()).st_size
        except PathOutsideWorkspace:
            log.warning("repository rule file %s points outside the workspace; ignored", name)
            continue
        except OSError:
            continue
        text = data[:max_bytes].decode("utf-8", errors="ignore").strip()
        if len(data) > max_bytes:
            text += f"\n\n[... cut: the file has {size} bytes, only the first {max_bytes} are shown]"
        if text:
            rules[name] = text
    return rules

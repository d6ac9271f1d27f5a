"""Path confinement for the workspace server: every path a tool touches stays under the root.

The model names files; a prompt-injected model will try `../`, absolute paths and
symlinks to reach the host's files. Confinement is decided on the *resolved* path
(symlinks followed, `..` applied physically), so a link inside the workspace that points
outside is refused just like `../x`. Paths that do not exist yet (a file to create) are
resolved as far as they exist and the rest is taken literally, which is what
`Path.resolve(strict=False)` does.
"""

from __future__ import annotations

import os
from pathlib import Path

__all__ = ["PathOutsideWorkspace", "is_inside", "relative_display", "resolve_in_root"]


class PathOutsideWorkspace(ValueError):
    """The path resolves outside the workspace root; the message names the path as given."""


def is_inside(path: Path, root: Path) -> bool:
    """Whether the already-resolved `path` is `root` itself or below it."""
    return path == root or root in path.parents


def resolve_in_root(root: Path, path: str | os.PathLike[str]) -> Path:
    """Resolve `path` (relative to `root`, or absolute) and refuse it if it leaves `root`.

    `root` must already be resolved (see `Path.resolve`). An empty path means the root.
    Raises `PathOutsideWorkspace` with a message fit for the model.
    """
    text = os.fspath(path)
    if "\x00" in text:
        raise PathOutsideWorkspace(f"invalid path {text!r}: it contains a NUL character")
    candidate = Path(text) if text else root
    if not candidate.is_absolute():
        candidate = root / candidate
    try:
        resolved = candidate.resolve(strict=False)
    except (OSError, RuntimeError) as error:  # symlink loops end here
        raise PathOutsideWorkspace(f"cannot resolve path {text!r}: {error.__class__.__name__}") from None
    if not is_inside(resolved, root):
        raise PathOutsideWorkspace(f"path {text!r} is outside the workspace ({root}); only paths inside it are allowed")
    return resolved


def relative_display(path: Path, root: Path) -> str:
    """The path as the model should see it: relative to the root, `.` for the root itself."""
    try:
        relative = path.relative_to(root)
    except ValueError:
        return str(path)
    return str(relative) if str(relative) != "." else "."

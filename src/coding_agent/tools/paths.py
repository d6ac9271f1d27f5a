"""Confinement for the workspace server: every file a tool touches stays under the root.

The model names files; a prompt-injected model will try `../`, absolute paths, symlinks
and hard links to reach the host's files, and it can run commands that swap a directory
for a symlink between a check and the open that follows it. So nothing here checks a
path and then opens it by name: `ConfinedRoot` walks from a descriptor of the root one
component at a time with `O_NOFOLLOW` (`openat`-style, `dir_fd=`), and every open is
relative to the directory descriptor the walk holds. A symlink met on the way is read
(`readlink` on the same descriptor) and its target interpreted inside the root — a
target outside it, or through `.git`, is refused. A swap after that simply meets the
next `O_NOFOLLOW` open. Hard links: a regular file with more than one link is refused,
because its other name may be outside the workspace; writes replace the directory entry
(`rename` of a temporary file), so they never write through a link at all.

File names are bytes on Linux; names that are not UTF-8 come back from the OS with
surrogate escapes, which JSON (and FastMCP) cannot carry: `escape_text` shows them as
backslash escapes instead (`bad\\xffname.txt`).
"""

from __future__ import annotations

import errno
import os
import posixpath
import stat
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

__all__ = [
    "ConfinedRoot",
    "Located",
    "PathOutsideWorkspace",
    "escape_text",
    "is_git_name",
    "relative_display",
    "resolve_in_root",
]

_MAX_LINK_HOPS = 40
_DIRECTORY_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC


class PathOutsideWorkspace(ValueError):
    """The path leaves the workspace (or names `.git`); the message names the path as given."""


def escape_text(text: str) -> str:
    """`text` with surrogate escapes (undecodable bytes) and lone surrogates as backslash escapes.

    Everything else is unchanged; the result always encodes as UTF-8.
    """
    try:
        text.encode("utf-8")
        return text
    except UnicodeEncodeError:
        pass
    try:
        return text.encode("utf-8", "surrogateescape").decode("utf-8", "backslashreplace")
    except UnicodeEncodeError:  # a lone surrogate that is not an escaped byte
        return text.encode("utf-8", "backslashreplace").decode("utf-8")


def is_git_name(name: str) -> bool:
    """Whether a path component is `.git` in any letter case (git's own metadata)."""
    return name.lower() == ".git"


def relative_display(path: Path, root: Path) -> str:
    """The path as the model should see it: relative to the root, `.` for the root itself."""
    try:
        relative = path.relative_to(root)
    except ValueError:
        return escape_text(str(path))
    return escape_text(str(relative)) if str(relative) != "." else "."


@dataclass
class Located:
    """A path found under the root: the descriptor of its directory and its last name.

    `name` is empty for the root itself (then `dir_fd` is the root). `parts` are the
    components from the root, symlinks inside the root already followed.
    """

    dir_fd: int
    name: str
    parts: tuple[str, ...]

    @property
    def relative(self) -> str:
        return "/".join(self.parts) or "."


class ConfinedRoot:
    """Descriptor-relative access to the files under one root directory."""

    def __init__(self, root: Path) -> None:
        self.root = root.resolve()
        self._given = str(root)

    def components(self, path: str | os.PathLike[str]) -> tuple[str, ...]:
        """`path` (relative, or absolute inside the root) as components; refuses what leaves it."""
        text = os.fspath(path)
        if "\x00" in text:
            raise PathOutsideWorkspace(f"invalid path {text!r}: it contains a NUL character")
        if text.startswith("/"):
            relative = None
            for prefix in {str(self.root), self._given.rstrip("/")}:
                if text == prefix or text.startswith(prefix + "/"):
                    relative = text[len(prefix) :].lstrip("/")
            if relative is None:
                # The root reached through another name (a symlink to it): only the
                # prefix is resolved here; the walk below still starts at the root.
                real = os.path.realpath(text)
                root = str(self.root)
                if real != root and not real.startswith(root + "/"):
                    raise self._outside(text)
                relative = real[len(root) :].lstrip("/")
            text = relative
        return self._checked(text, text)

    def _checked(self, relative: str, given: str) -> tuple[str, ...]:
        normal = posixpath.normpath(relative) if relative else "."
        if normal == ".." or normal.startswith("../") or normal.startswith("/"):
            raise self._outside(given)
        parts = tuple(part for part in normal.split("/") if part not in ("", "."))
        if any(is_git_name(part) for part in parts):
            raise PathOutsideWorkspace(f"{given!r} is inside .git; the git metadata is not part of the workspace")
        return parts

    def _outside(self, given: str) -> PathOutsideWorkspace:
        return PathOutsideWorkspace(
            f"path {given!r} is outside the workspace ({self.root}); only paths inside it are allowed"
        )

    def _link_target(self, done: tuple[str, ...], target: str, given: str) -> tuple[str, ...]:
        """The components of a symlink's target, which must stay inside the root."""
        if target.startswith("/"):
            root = str(self.root)
            if target != root and not target.startswith(root + "/"):
                raise PathOutsideWorkspace(f"{given!r} goes through a symlink to {target!r}, outside the workspace")
            return self._checked(target[len(root) :].lstrip("/"), given)
        return self._checked(posixpath.join(*done, target) if done else target, given)

    def open_root(self) -> int:
        return os.open(self.root, _DIRECTORY_FLAGS)

    @contextmanager
    def locate(
        self, path: str, *, follow_last: bool = True, make_parents: bool = False, refuse_links: bool = False
    ) -> Iterator[Located]:
        """Walk to `path` without following anything out of the root; yields its `Located`.

        `follow_last`: a symlink as the last component is followed (inside the root)
        rather than returned as itself. `make_parents`: missing directories are created.
        `refuse_links`: a symlink as a directory on the way is refused, even one that stays
        inside the root (for the host's own copies, which follow no link the tree holds).
        Raises `PathOutsideWorkspace`, `FileNotFoundError`, `NotADirectoryError`.
        """
        given = os.fspath(path)
        parts = self.components(given)
        for _ in range(_MAX_LINK_HOPS):
            restart = self._walk(self.open_root(), parts, given, follow_last, make_parents, refuse_links)
            if isinstance(restart, tuple):
                parts = restart
                continue
            located = restart
            try:
                yield located
            finally:
                os.close(located.dir_fd)
            return
        raise PathOutsideWorkspace(f"{given!r}: too many levels of symbolic links")

    def _walk(
        self, fd: int, parts: tuple[str, ...], given: str, follow_last: bool, make_parents: bool, refuse_links: bool
    ) -> Located | tuple[str, ...]:
        """One walk from the root descriptor `fd` (owned here): a `Located`, or new parts to restart with."""
        done: tuple[str, ...] = ()
        try:
            for index, name in enumerate(parts[:-1]):
                try:
                    next_fd = _open_child_directory(fd, name, make_parents)
                except FileNotFoundError:
                    raise FileNotFoundError(errno.ENOENT, f"{'/'.join((*done, name))} does not exist") from None
                except OSError as error:
                    if error.errno not in (errno.ELOOP, errno.ENOTDIR):
                        raise
                    target = self._readlink(fd, name)
                    if target is None:
                        raise NotADirectoryError(errno.ENOTDIR, f"{'/'.join((*done, name))} is not a directory") from None
                    if refuse_links:
                        raise PathOutsideWorkspace(f"{given!r} goes through the symlink {'/'.join((*done, name))!r}") from None
                    os.close(fd)
                    fd = -1
                    return self._link_target(done, target, given) + parts[index + 1 :]
                os.close(fd)
                fd = next_fd
                done += (name,)
            if not parts:
                return Located(fd, "", ())
            last = parts[-1]
            target = self._readlink(fd, last) if follow_last else None
            if target is not None:
                os.close(fd)
                fd = -1
                return self._link_target(done, target, given)
            return Located(fd, last, (*done, last))
        except BaseException:
            if fd >= 0:
                os.close(fd)
            raise

    @staticmethod
    def _readlink(dir_fd: int, name: str) -> str | None:
        try:
            return os.readlink(name, dir_fd=dir_fd)
        except OSError:
            return None

    # -- operations on a located path ------------------------------------------------
    @staticmethod
    def lstat(located: Located) -> os.stat_result:
        if not located.name:
            return os.fstat(located.dir_fd)
        return os.stat(located.name, dir_fd=located.dir_fd, follow_symlinks=False)

    @staticmethod
    def open_read(located: Located) -> int:
        """A descriptor of the regular file at `located`; refuses links, devices, FIFOs, hard links."""
        fd = os.open(located.name, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, dir_fd=located.dir_fd)
        try:
            _require_plain_file(os.fstat(fd), located.relative)
        except BaseException:
            os.close(fd)
            raise
        return fd

    @staticmethod
    def open_directory(located: Located) -> int:
        if not located.name:
            return os.dup(located.dir_fd)
        return os.open(located.name, _DIRECTORY_FLAGS, dir_fd=located.dir_fd)

    @staticmethod
    def replace_file(located: Located, data: bytes) -> bool:
        """Write `data` as the file at `located` through a temporary file and `rename`.

        The rename replaces the directory entry: a hard link or a symlink at that name
        is replaced, never written through. Returns whether a file existed before.
        """
        dir_fd, name = located.dir_fd, located.name
        try:
            previous: os.stat_result | None = os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
        except FileNotFoundError:
            previous = None
        if previous is not None and stat.S_ISDIR(previous.st_mode):
            raise IsADirectoryError(errno.EISDIR, f"{located.relative} is a directory, not a file")
        mode = stat.S_IMODE(previous.st_mode) if previous is not None and stat.S_ISREG(previous.st_mode) else 0o644
        temporary = f".{name[:200]}.coding-agent-{os.getpid()}-{os.urandom(4).hex()}.tmp"
        fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, mode, dir_fd=dir_fd)
        try:
            with os.fdopen(fd, "wb", closefd=True) as handle:
                os.fchmod(handle.fileno(), mode)  # the umask narrowed the mode given to open
                handle.write(data)
            os.rename(temporary, name, src_dir_fd=dir_fd, dst_dir_fd=dir_fd)
        except BaseException:
            try:
                os.unlink(temporary, dir_fd=dir_fd)
            except OSError:
                pass
            raise
        return previous is not None


def _open_child_directory(fd: int, name: str, make: bool) -> int:
    """`name` under `fd` as a directory descriptor, never through a symlink; made if asked."""
    try:
        return os.open(name, _DIRECTORY_FLAGS, dir_fd=fd)
    except FileNotFoundError:
        if not make:
            raise
    try:
        os.mkdir(name, dir_fd=fd)
    except FileExistsError:
        pass
    return os.open(name, _DIRECTORY_FLAGS, dir_fd=fd)  # what is there now, checked again


def _require_plain_file(status: os.stat_result, shown: str) -> None:
    if stat.S_ISDIR(status.st_mode):
        raise IsADirectoryError(errno.EISDIR, f"{shown} is a directory, not a file")
    if not stat.S_ISREG(status.st_mode):
        raise PathOutsideWorkspace(f"{shown!r} is not a regular file (a device, socket or FIFO); it cannot be opened")
    if status.st_nlink > 1:
        raise PathOutsideWorkspace(
            f"{shown!r} is a hard link ({status.st_nlink} names); the tools do not open hard-linked files, "
            "because another name may be outside the workspace"
        )


def resolve_in_root(root: Path, path: str | os.PathLike[str]) -> Path:
    """The path under `root` that `path` names (symlinks inside the root followed).

    For messages and for callers that only need the name; file access goes through
    `ConfinedRoot.locate`, which holds descriptors. Raises `PathOutsideWorkspace`.
    """
    confined = ConfinedRoot(root)
    try:
        with confined.locate(os.fspath(path)) as located:
            return confined.root.joinpath(*located.parts)
    except FileNotFoundError:
        # A path to create: its missing tail is taken literally (already checked lexically).
        return confined.root.joinpath(*confined.components(os.fspath(path)))
    except OSError as error:
        raise PathOutsideWorkspace(f"cannot resolve path {os.fspath(path)!r}: {error.__class__.__name__}") from None

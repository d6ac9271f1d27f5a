"""Copies and removals under a workspace that follow no link its tree holds (SPEC 15).

The host copies the setup's files between the setup cache and a workspace as the
agent's own user, so a workspace a pull request shaped must not steer those copies: any
directory of the tree may be a symlink to the host's files, any file a hard link. Both
ends are walked with `ConfinedRoot.locate(refuse_links=True)`: one `O_NOFOLLOW` open per
component from a descriptor of the root, a symlink on the way refused rather than
followed (even one that stays inside the root). Below that, everything is relative to
directory descriptors: what is in the way is removed without following it
(`shutil.rmtree(dir_fd=...)`, `unlink`), and every name is created anew (`O_EXCL`,
`mkdir`), so nothing is ever written through an existing name. Symlinks inside a copied
tree (a virtualenv's `bin/python`) are copied as symlinks, never followed; sockets,
FIFOs and devices are not copied.
"""

from __future__ import annotations

import os
import shutil
import stat

from coding_agent.tools.paths import ConfinedRoot, Located, PathOutsideWorkspace

__all__ = ["copy_between", "remove_under"]

_DIRECTORY_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_CHUNK = 1024 * 1024


def copy_between(source: ConfinedRoot, target: ConfinedRoot, relative: str) -> None:
    """Copy `relative` (a file, a symlink or a whole directory) from under `source` to the
    same name under `target`, replacing what is there; missing parents are created.

    Raises `PathOutsideWorkspace` for a path that leaves either root or goes through a
    symlink, `FileNotFoundError` when `source` has no such entry, `OSError` otherwise.
    """
    with source.locate(relative, follow_last=False, refuse_links=True) as found:
        with target.locate(relative, follow_last=False, make_parents=True, refuse_links=True) as place:
            _require_name(found, relative)
            _require_name(place, relative)
            os.stat(found.name, dir_fd=found.dir_fd, follow_symlinks=False)  # missing: nothing is removed
            _remove_entry(place.dir_fd, place.name)
            _copy_entry(found.dir_fd, found.name, place.dir_fd, place.name)


def remove_under(root: ConfinedRoot, relative: str) -> None:
    """Remove `relative` under `root` (a whole directory, or the link itself); missing is fine."""
    try:
        with root.locate(relative, follow_last=False, refuse_links=True) as place:
            _require_name(place, relative)
            _remove_entry(place.dir_fd, place.name)
    except FileNotFoundError:
        return


def _require_name(located: Located, relative: str) -> None:
    if not located.name:
        raise PathOutsideWorkspace(f"{relative!r} names the workspace itself, not a path in it")


def _remove_entry(dir_fd: int, name: str) -> None:
    try:
        status = os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
    except FileNotFoundError:
        return
    if stat.S_ISDIR(status.st_mode):
        shutil.rmtree(name, dir_fd=dir_fd)  # descriptor-based: never leaves the directory through a link
    else:
        os.unlink(name, dir_fd=dir_fd)


def _copy_entry(source_dir: int, name: str, target_dir: int, target_name: str) -> None:
    status = os.stat(name, dir_fd=source_dir, follow_symlinks=False)
    if stat.S_ISLNK(status.st_mode):
        os.symlink(os.readlink(name, dir_fd=source_dir), target_name, dir_fd=target_dir)
    elif stat.S_ISDIR(status.st_mode):
        _copy_directory(source_dir, name, target_dir, target_name, status)
    elif stat.S_ISREG(status.st_mode):
        _copy_file(source_dir, name, target_dir, target_name)


def _copy_directory(source_dir: int, name: str, target_dir: int, target_name: str, status: os.stat_result) -> None:
    os.mkdir(target_name, 0o700, dir_fd=target_dir)
    source_fd = os.open(name, _DIRECTORY_FLAGS, dir_fd=source_dir)
    try:
        target_fd = os.open(target_name, _DIRECTORY_FLAGS, dir_fd=target_dir)
        try:
            for child in os.listdir(source_fd):
                _copy_entry(source_fd, child, target_fd, child)
            os.fchmod(target_fd, stat.S_IMODE(status.st_mode))
            os.utime(target_fd, ns=(status.st_atime_ns, status.st_mtime_ns))
        finally:
            os.close(target_fd)
    finally:
        os.close(source_fd)


def _copy_file(source_dir: int, name: str, target_dir: int, target_name: str) -> None:
    source_fd = os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, dir_fd=source_dir)
    with os.fdopen(source_fd, "rb") as reader:
        status = os.fstat(reader.fileno())
        if not stat.S_ISREG(status.st_mode):  # swapped since it was looked at
            return
        flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
        with os.fdopen(os.open(target_name, flags, 0o600, dir_fd=target_dir), "wb") as writer:
            shutil.copyfileobj(reader, writer, _CHUNK)
            writer.flush()
            os.fchmod(writer.fileno(), stat.S_IMODE(status.st_mode))
            os.utime(writer.fileno(), ns=(status.st_atime_ns, status.st_mtime_ns))

"""The file tools of the workspace server (SPEC 6): view, create, str_replace, insert, list, search.

Every access goes through `paths.ConfinedRoot` (descriptor-relative, `O_NOFOLLOW`, no
hard links, `.git` refused in any letter case), so a symlink swapped in by a command the
model runs between two tool calls, or during one, never leads outside the workspace.
Reads are capped: `view` streams the file line by line and stops at the last line it
shows (a 300 MB file costs what the shown lines cost), overlong lines are cut while
reading, and editing refuses files larger than `EDIT_MAX_BYTES`. Names that are not
UTF-8 are shown with backslash escapes (`paths.escape_text`).

Methods raise `WorkspaceError` with a message for the model. (Longer than most modules:
the six tools share the confined-access and line-reading helpers, and splitting them
would put one tool's rules in two places.)
"""

from __future__ import annotations

import errno
import io
import os
import re
import stat
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import cast

from coding_agent.tools.paths import ConfinedRoot, Located, PathOutsideWorkspace, escape_text, is_git_name

__all__ = ["Workspace", "WorkspaceError"]

VIEW_MAX_LINES = 2000
LINE_MAX_CHARS = 2000
DIRECTORY_MAX_ENTRIES = 500
LIST_MAX_FILES = 1000
SEARCH_MAX_MATCHES = 200
SEARCH_MAX_FILE_BYTES = 2_000_000
SEARCH_LINE_MAX_CHARS = 300
SNIPPET_CONTEXT_LINES = 3
EDIT_MAX_BYTES = 10_000_000
_SKIPPED_DIRECTORIES = frozenset({".hg", ".svn"})
_BINARY_PROBE_BYTES = 8192
_LINE_READ_BYTES = LINE_MAX_CHARS * 4  # UTF-8: at most 4 bytes per character
_SKIP_CHUNK = 65536
_LINES = re.compile(r"[^\n]*\n|[^\n]+")


class WorkspaceError(ValueError):
    """A tool could not do what was asked; the message tells the model what to do instead."""


def _skipped(name: str) -> bool:
    return is_git_name(name) or name in _SKIPPED_DIRECTORIES


def _cut(line: str, cut: bool) -> str:
    if len(line) > LINE_MAX_CHARS:
        line, cut = line[:LINE_MAX_CHARS], True
    return line + " [... rest of this line cut]" if cut else line


def _number_lines(lines: Sequence[str], first: int) -> str:
    """`cat -n` style: the model quotes line numbers back in `insert` and `view_range`."""
    return "\n".join(f"{number:6}\t{_cut(line, False)}" for number, line in enumerate(lines, start=first))


def _split_lines(text: str, keepends: bool = False) -> list[str]:
    """Lines split at `\\n` only, as `view` numbers them (not at form feeds or U+2028)."""
    lines = _LINES.findall(text)
    return lines if keepends else [line.rstrip("\n").removesuffix("\r") for line in lines]


class _LineReader:
    """Reads a file's lines one at a time, each at most `_LINE_READ_BYTES` kept."""

    def __init__(self, handle: io.BufferedReader) -> None:
        self._handle = handle

    def next(self) -> tuple[str, bool] | None:
        """(the line without its ending, whether it was cut), or None at the end."""
        data = self._handle.readline(_LINE_READ_BYTES)
        if not data:
            return None
        cut = not data.endswith(b"\n") and len(data) >= _LINE_READ_BYTES
        while cut:  # skip the rest of an overlong line without keeping it
            rest = self._handle.readline(_SKIP_CHUNK)
            if not rest or rest.endswith(b"\n"):
                break
        text = data.decode("utf-8", errors="replace").rstrip("\n").removesuffix("\r")
        return text, cut


class Workspace:
    """The file operations of the server, on one root."""

    def __init__(self, root: Path) -> None:
        self._confined = ConfinedRoot(root)
        self.root = self._confined.root

    @contextmanager
    def _locate(self, path: str, *, make_parents: bool = False) -> Iterator[Located]:
        """`ConfinedRoot.locate` with every failure turned into a `WorkspaceError`."""
        try:
            with self._confined.locate(path, make_parents=make_parents) as located:
                yield located
        except WorkspaceError:
            raise
        except PathOutsideWorkspace as error:
            raise WorkspaceError(escape_text(str(error))) from None
        except FileNotFoundError:
            raise WorkspaceError(f"{path!r} does not exist; use list_files to see what is there") from None
        except (NotADirectoryError, IsADirectoryError) as error:
            raise WorkspaceError(f"{path!r}: {escape_text(error.strerror or str(error))}") from None
        except UnicodeError:
            raise WorkspaceError(f"{path!r} is not a valid file name") from None
        except OSError as error:
            raise WorkspaceError(f"{path!r}: {os.strerror(error.errno or errno.EIO)}") from None

    def _open_file(self, located: Located) -> io.BufferedReader:
        try:
            fd = self._confined.open_read(located)
        except FileNotFoundError:
            raise WorkspaceError(f"{located.relative!r} does not exist; use create to make a new file") from None
        except IsADirectoryError:
            raise WorkspaceError(f"{escape_text(located.relative)} is a directory, not a file") from None
        except OSError as error:
            if error.errno == errno.ELOOP:
                raise WorkspaceError(f"{escape_text(located.relative)} is a symlink that cannot be followed") from None
            raise
        return cast(io.BufferedReader, open(fd, "rb", buffering=_SKIP_CHUNK))  # noqa: SIM115 - closed by the callers

    def _read_for_edit(self, located: Located) -> str:
        with self._open_file(located) as handle:
            data = handle.read(EDIT_MAX_BYTES + 1)
        if len(data) > EDIT_MAX_BYTES:
            raise WorkspaceError(
                f"{escape_text(located.relative)} is larger than {EDIT_MAX_BYTES} bytes; edit it with a command instead"
            )
        if b"\x00" in data[:_BINARY_PROBE_BYTES]:
            raise WorkspaceError(f"{escape_text(located.relative)} is a binary file; it cannot be handled as text")
        # surrogateescape: bytes that are not UTF-8 are written back as they were.
        return data.decode("utf-8", errors="surrogateescape")

    def _write(self, located: Located, text: str) -> bool:
        if not located.name:
            raise WorkspaceError("the workspace root is a directory; give a file path")
        try:
            return self._confined.replace_file(located, text.encode("utf-8", errors="surrogateescape"))
        except IsADirectoryError:
            raise WorkspaceError(f"{escape_text(located.relative)} is a directory, not a file") from None
        except UnicodeEncodeError:
            raise WorkspaceError("the content holds characters that cannot be written as UTF-8") from None

    def _snippet(self, text: str, first_line: int, last_line: int) -> str:
        lines = _split_lines(text)
        start = max(1, first_line - SNIPPET_CONTEXT_LINES)
        end = min(len(lines), last_line + SNIPPET_CONTEXT_LINES)
        return _number_lines(lines[start - 1 : end], start)

    # -- view ------------------------------------------------------------------------
    def view(self, path: str, view_range: list[int] | None = None) -> str:
        with self._locate(path) as located:
            if stat.S_ISDIR(self._confined.lstat(located).st_mode):
                if view_range is not None:
                    raise WorkspaceError("view_range only applies to files, and this path is a directory")
                return self._directory_listing(located)
            if view_range is not None and len(view_range) != 2:
                raise WorkspaceError("view_range must be [first_line, last_line] (last_line -1 means the end)")
            first, last = view_range if view_range is not None else (1, -1)
            if first < 1 or (last != -1 and last < first):
                raise WorkspaceError(f"view_range [{first}, {last}] is not a range of lines (they start at 1)")
            with self._open_file(located) as handle:
                if b"\x00" in handle.peek(_BINARY_PROBE_BYTES)[:_BINARY_PROBE_BYTES]:
                    raise WorkspaceError(f"{escape_text(located.relative)} is a binary file; it cannot be shown as text")
                return self._view_lines(_LineReader(handle), located.relative, first, last, view_range is None)

    def _view_lines(self, reader: _LineReader, shown: str, first: int, last: int, whole: bool) -> str:
        """Lines `first`..`last` (-1: to the end), at most VIEW_MAX_LINES, reading no further."""
        shown = escape_text(shown)
        number = 0
        out: list[str] = []
        stop = first + VIEW_MAX_LINES - 1 if last == -1 else min(last, first + VIEW_MAX_LINES - 1)
        more = False
        while True:
            line = reader.next()
            if line is None:
                break
            number += 1
            if number > stop:
                more = True
                break
            if number >= first:
                out.append(f"{number:6}\t{_cut(*line)}")
        if number == 0:
            if first > 1:
                raise WorkspaceError(f"view_range starts at {first}, but {shown} is empty")
            return f"{shown} is empty"
        if first > number:
            raise WorkspaceError(f"view_range starts at {first}, but {shown} has {number} lines")
        text = "\n".join(out)
        if more and (last == -1 or last > stop):
            hint = "Use view_range to see the rest." if whole else "Ask for the next range to see more."
            text += f"\n[{shown}: lines {first}-{stop} shown; the file goes on. {hint}]"
        return text

    def _directory_listing(self, located: Located) -> str:
        """Two levels deep: enough to orient, short enough to read."""
        base = located.parts
        entries: list[str] = []
        total = 0
        fd = self._confined.open_directory(located)
        try:
            for name, is_dir in _entries(fd):
                total += 1
                entries.append(escape_text("/".join((*base, name))) + ("/" if is_dir else ""))
                if not is_dir:
                    continue
                for child, child_is_dir in _child_entries(fd, name):
                    total += 1
                    entries.append(escape_text("/".join((*base, name, child))) + ("/" if child_is_dir else ""))
        finally:
            os.close(fd)
        if not entries:
            return f"{escape_text(located.relative)} is an empty directory"
        shown = entries[:DIRECTORY_MAX_ENTRIES]
        text = "\n".join(shown)
        if total > len(shown):
            text += f"\n[... {total - len(shown)} more entries; use list_files on a subdirectory]"
        return text

    # -- edits -----------------------------------------------------------------------
    def create(self, path: str, content: str) -> str:
        with self._locate(path, make_parents=True) as located:
            existed = self._write(located, content)
            verb = "Overwrote" if existed else "Created"
            return f"{verb} {escape_text(located.relative)} ({len(_split_lines(content))} lines)"

    def str_replace(self, path: str, old_str: str, new_str: str) -> str:
        if not old_str:
            raise WorkspaceError("old_str is empty; give the exact text to replace (use insert to add text)")
        with self._locate(path) as located:
            shown = escape_text(located.relative)
            text = self._read_for_edit(located)
            count = text.count(old_str)
            if count == 0:
                raise WorkspaceError(
                    f"old_str was not found in {shown}; view the file and copy the exact text, "
                    "whitespace and indentation included"
                )
            if count > 1:
                starts = [match.start() for match in re.finditer(re.escape(old_str), text)]
                lines = ", ".join(str(text.count("\n", 0, start) + 1) for start in starts[:20])
                raise WorkspaceError(
                    f"old_str occurs {count} times in {shown} (starting on lines {lines}); "
                    "include more surrounding lines so that it occurs exactly once"
                )
            position = text.index(old_str)
            updated = text[:position] + new_str + text[position + len(old_str) :]
            self._write(located, updated)
        first = updated.count("\n", 0, position) + 1
        last = first + new_str.count("\n")
        return f"Edited {shown}. The changed region now reads:\n" + self._snippet(updated, first, last)

    def insert(self, path: str, insert_line: int, text: str) -> str:
        with self._locate(path) as located:
            shown = escape_text(located.relative)
            lines = _split_lines(self._read_for_edit(located), keepends=True)
            if insert_line < 0 or insert_line > len(lines):
                raise WorkspaceError(
                    f"insert_line {insert_line} is out of range: {shown} has {len(lines)} lines (0 inserts at the top)"
                )
            if insert_line > 0 and not lines[insert_line - 1].endswith("\n"):
                lines[insert_line - 1] += "\n"
            if insert_line < len(lines) and text and not text.endswith("\n"):
                text += "\n"
            lines.insert(insert_line, text)
            updated = "".join(lines)
            self._write(located, updated)
        inserted = max(1, len(_split_lines(text)))
        return f"Inserted {inserted} line(s) after line {insert_line} of {shown}:\n" + self._snippet(
            updated, insert_line + 1, insert_line + inserted
        )

    # -- listing and search ----------------------------------------------------------
    def _files(self, located: Located) -> Iterator[tuple[str, int, str]]:
        """(display name, directory fd, name) of each file under `located`, sorted; links not followed."""
        if not stat.S_ISDIR(self._confined.lstat(located).st_mode):
            yield escape_text(located.relative), located.dir_fd, located.name
            return
        fd = self._confined.open_directory(located)
        try:
            for directory, subdirectories, files, dir_fd in os.fwalk(".", dir_fd=fd):
                subdirectories[:] = sorted(name for name in subdirectories if not _skipped(name))
                prefix = tuple(part for part in (*located.parts, *directory.split("/")) if part not in ("", "."))
                for name in sorted(files):
                    yield escape_text("/".join((*prefix, name))), dir_fd, name
        finally:
            os.close(fd)

    def list_files(self, path: str = ".") -> str:
        with self._locate(path) as located:
            shown: list[str] = []
            total = 0
            for display, _, _ in self._files(located):
                total += 1
                if len(shown) < LIST_MAX_FILES:
                    shown.append(display)
            where = escape_text(located.relative)
        if not shown:
            return f"no files under {where}"
        text = "\n".join(shown)
        if total > len(shown):
            text += f"\n[... {total - len(shown)} more files not shown; list a subdirectory]"
        return text

    def search(self, pattern: str, path: str = ".", regex: bool = False, ignore_case: bool = False) -> str:
        if not pattern:
            raise WorkspaceError("pattern is empty")
        flags = re.IGNORECASE if ignore_case else 0
        try:
            compiled = re.compile(pattern if regex else re.escape(pattern), flags)
        except re.error as error:
            raise WorkspaceError(f"invalid regular expression {pattern!r}: {error}") from None
        matches: list[str] = []
        more = 0
        with self._locate(path) as located:
            where = escape_text(located.relative)
            for display, dir_fd, name in self._files(located):
                data = _read_small_file(dir_fd, name)
                if data is None or b"\x00" in data[:_BINARY_PROBE_BYTES]:
                    continue
                for number, line in enumerate(_split_lines(data.decode("utf-8", errors="replace")), start=1):
                    if not compiled.search(line):
                        continue
                    if len(matches) >= SEARCH_MAX_MATCHES:
                        more += 1
                        continue
                    line = line.strip()
                    if len(line) > SEARCH_LINE_MAX_CHARS:
                        line = line[:SEARCH_LINE_MAX_CHARS] + " [...]"
                    matches.append(f"{display}:{number}: {line}")
        if not matches:
            return f"no matches for {pattern!r} under {where}"
        text = "\n".join(matches)
        if more:
            text += f"\n[... {more} more matches not shown; narrow the pattern or the path]"
        return text


def _read_small_file(dir_fd: int, name: str) -> bytes | None:
    """A plain file's content if it is small enough to search; None for links, hard links, others."""
    try:
        fd = os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, dir_fd=dir_fd)
    except OSError:
        return None
    try:
        status = os.fstat(fd)
        if not stat.S_ISREG(status.st_mode) or status.st_nlink > 1 or status.st_size > SEARCH_MAX_FILE_BYTES:
            return None
        with open(fd, "rb", closefd=False) as handle:
            return handle.read(SEARCH_MAX_FILE_BYTES + 1)[:SEARCH_MAX_FILE_BYTES]
    except OSError:
        return None
    finally:
        os.close(fd)


def _entries(fd: int) -> list[tuple[str, bool]]:
    """(name, is a real directory) of the entries of directory `fd`, sorted, VCS metadata left out."""
    with os.scandir(fd) as iterator:
        found = [(entry.name, entry.is_dir(follow_symlinks=False)) for entry in iterator if not _skipped(entry.name)]
    return sorted(found)


def _child_entries(fd: int, name: str) -> list[tuple[str, bool]]:
    try:
        child = os.open(name, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=fd)
    except OSError:
        return []
    try:
        return _entries(child)
    finally:
        os.close(child)

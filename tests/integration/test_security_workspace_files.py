"""Attacks on the workspace server's file tools (SPEC 6, 15; issue 11 items 4, 6, 13).

Symlinks swapped in while a tool works, hard links to files outside, `.git` in any
letter case, names that are not UTF-8, and a 300 MB file of which one line is asked
for. The file tools run in-process where a race must be driven from a thread, and over
real stdio (the MCP server process) where the server's own memory is the evidence.
"""

from __future__ import annotations

import os
import threading
from pathlib import Path

import pytest

from coding_agent.tools.workspace_files import Workspace, WorkspaceError

from .test_workspace_server import call, workspace_session

SECRET = "OUTSIDE-SECRET-0f3a9"


@pytest.fixture
def layout(tmp_path: Path) -> tuple[Path, Path]:
    root = (tmp_path / "ws").resolve()
    outside = (tmp_path / "outside").resolve()
    (root / "dir").mkdir(parents=True)
    outside.mkdir()
    (outside / "secret.txt").write_text(f"{SECRET}\n")
    (root / "dir" / "file.txt").write_text("inside\n")
    return root, outside


def test_a_directory_swapped_for_a_symlink_never_leads_outside(layout: tuple[Path, Path]) -> None:
    """A command the model runs flips `dir` between a directory and a link to outside, as fast as it can."""
    root, outside = layout
    workspace = Workspace(root)
    stop = threading.Event()

    def flip() -> None:
        real, parked, link = root / "dir", root / "dir.real", root / "dir.link"
        while not stop.is_set():
            try:
                os.rename(real, parked)
                os.symlink(outside, link)
                os.rename(link, real)
                os.unlink(real)
                os.rename(parked, real)
            except OSError:
                pass

    flipper = threading.Thread(target=flip, daemon=True)
    flipper.start()
    seen: list[str] = []
    try:
        for index in range(3000):
            for call_tool in (
                lambda: workspace.create(f"dir/new-{index % 7}.txt", "planted\n"),
                lambda: workspace.view("dir/secret.txt"),
                lambda: workspace.str_replace("dir/secret.txt", SECRET, "overwritten"),
            ):
                try:
                    seen.append(call_tool())
                except WorkspaceError as error:
                    seen.append(str(error))
    finally:
        stop.set()
        flipper.join()
    assert sorted(path.name for path in outside.iterdir()) == ["secret.txt"], "a file was created outside"
    assert (outside / "secret.txt").read_text() == f"{SECRET}\n", "the outside file was changed"
    assert not any(SECRET in text for text in seen), "the outside file was read"
    assert any(text.startswith("Created dir/") or text.startswith("Overwrote dir/") for text in seen), "creates worked"


def test_hard_links_to_outside_files_are_neither_read_nor_written(layout: tuple[Path, Path]) -> None:
    root, outside = layout
    os.link(outside / "secret.txt", root / "linked.txt")
    workspace = Workspace(root)

    for attempt in (
        lambda: workspace.view("linked.txt"),
        lambda: workspace.str_replace("linked.txt", SECRET, "overwritten"),
        lambda: workspace.insert("linked.txt", 0, "planted"),
    ):
        with pytest.raises(WorkspaceError, match="hard link"):
            attempt()
    assert workspace.search(SECRET).startswith("no matches")
    created = workspace.create("linked.txt", "replaced\n")

    assert created.startswith("Overwrote linked.txt")
    assert (outside / "secret.txt").read_text() == f"{SECRET}\n", "create wrote through the hard link"
    assert (root / "linked.txt").read_text() == "replaced\n"


def test_a_final_symlink_to_outside_is_refused_for_every_tool(layout: tuple[Path, Path]) -> None:
    root, outside = layout
    (root / "leak.txt").symlink_to(outside / "secret.txt")
    (root / "leakdir").symlink_to(outside, target_is_directory=True)
    workspace = Workspace(root)
    for attempt in (
        lambda: workspace.view("leak.txt"),
        lambda: workspace.create("leak.txt", "x"),
        lambda: workspace.create("leakdir/new.txt", "x"),
        lambda: workspace.str_replace("leak.txt", SECRET, "x"),
        lambda: workspace.insert("leak.txt", 0, "x"),
        lambda: workspace.list_files("leakdir"),
        lambda: workspace.search(SECRET, "leakdir"),
    ):
        with pytest.raises(WorkspaceError, match="outside the workspace"):
            attempt()
    assert workspace.search(SECRET).startswith("no matches")
    assert sorted(path.name for path in outside.iterdir()) == ["secret.txt"]
    assert (outside / "secret.txt").read_text() == f"{SECRET}\n"


@pytest.mark.parametrize("name", [".git", ".GIT", ".Git", "dir/.gIt"])
def test_git_is_refused_in_any_letter_case_by_every_tool(layout: tuple[Path, Path], name: str) -> None:
    root, _ = layout
    (root / "dir" / ".Git").mkdir()
    (root / "dir" / ".Git" / "config").write_text("[core]\n")
    workspace = Workspace(root)
    for attempt in (
        lambda: workspace.view(f"{name}/config"),
        lambda: workspace.create(f"{name}/config", "x"),
        lambda: workspace.str_replace(f"{name}/config", "[core]", "x"),
        lambda: workspace.insert(f"{name}/config", 0, "x"),
        lambda: workspace.list_files(name),
        lambda: workspace.search("core", name),
    ):
        with pytest.raises(WorkspaceError, match=".git"):
            attempt()
    assert ".Git" not in workspace.list_files(".") and workspace.search("core").startswith("no matches")
    assert (root / "dir" / ".Git" / "config").read_text() == "[core]\n"


def test_non_utf8_names_are_shown_escaped(layout: tuple[Path, Path]) -> None:
    root, _ = layout
    with open(os.fsencode(root) + b"/caf\xe9.txt", "wb") as handle:
        handle.write(b"needle\n")
    workspace = Workspace(root)

    assert "caf\\xe9.txt" in workspace.list_files()
    assert workspace.search("needle") == "caf\\xe9.txt:1: needle"
    assert "caf\\xe9.txt" in workspace.view(".")
    (root / "latin1.txt").write_bytes(b"caf\xe9 = 1\nx = 2\n")
    workspace.str_replace("latin1.txt", "x = 2", "x = 3")
    assert (root / "latin1.txt").read_bytes() == b"caf\xe9 = 1\nx = 3\n", "bytes that are not UTF-8 survive an edit"


def _server_pids(root: Path) -> list[int]:
    pids = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                cmdline = (entry / "cmdline").read_bytes().split(b"\0")
            except OSError:
                continue
            if b"coding_agent.tools.workspace_server" in cmdline and str(root).encode() in cmdline:
                pids.append(int(entry.name))
    return pids


def _peak_rss_kib(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1])
    raise AssertionError("no VmHWM in /proc status")


async def test_viewing_one_line_of_a_300_mb_file_reads_only_that_line(tmp_path: Path) -> None:
    root = (tmp_path / "ws").resolve()
    root.mkdir()
    big = root / "big.log"
    with big.open("wb") as handle:
        handle.write(b"".join(f"line {number}\n".encode() for number in range(1, 3001)))
        handle.truncate(300 * 1024 * 1024)  # the rest is a hole: free on disk, 300 MB to read
    async with workspace_session(root) as session:
        text, error = await call(session, "view", path="small-missing.txt")  # warm the server up
        [pid] = _server_pids(root)
        before = _peak_rss_kib(pid)
        text, error = await call(session, "view", path="big.log", view_range=[2, 2])
        after = _peak_rss_kib(pid)
    assert (text, error) == ("     2\tline 2", False)
    assert after - before < 32 * 1024, f"the server's peak memory grew by {(after - before) // 1024} MB"

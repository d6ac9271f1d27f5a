"""The setup's disk limit watch (`setup.max_disk_mb`): what it counts, and when it stops."""

from __future__ import annotations

import os
from pathlib import Path

from coding_agent.workspace.disk_watch import DiskWatch, tree_bytes
from tests.support.waiting import wait_until


def _write(path: Path, size: int) -> None:
    path.write_bytes(os.urandom(size))  # random: no filesystem stores it as a hole


def test_tree_bytes_counts_hard_links_once_and_never_follows_symlinks(tmp_path: Path) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    _write(outside / "big", 1024 * 1024)
    tree = tmp_path / "tree"
    (tree / "sub").mkdir(parents=True)
    _write(tree / "sub" / "data", 256 * 1024)
    alone = tree_bytes(tree)
    os.link(tree / "sub" / "data", tree / "again")
    (tree / "link").symlink_to(outside)
    assert alone >= 256 * 1024
    assert tree_bytes(tree) - alone < 64 * 1024, "a hard link and a symlink add no data"


async def test_growth_past_the_limit_sets_stop_and_growth_under_it_does_not(tmp_path: Path) -> None:
    _write(tmp_path / "checked-out", 2 * 1024 * 1024)  # the baseline: not counted
    async with DiskWatch(tmp_path, 1024 * 1024, interval=0.01) as watch:
        _write(tmp_path / "small", 512 * 1024)
        await wait_until(lambda: watch.checks >= 2, 10, "two walks after the small write")
        assert not watch.stop.is_set() and not watch.exceeded
        _write(tmp_path / "large", 1024 * 1024)
        await wait_until(watch.stop.is_set, 10, "the watch to see the growth")
    assert watch.exceeded

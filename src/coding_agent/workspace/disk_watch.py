"""The setup's limit on what it may write (`setup.max_disk_mb`; issue 12, Bad input).

A setup that fills the disk would leave the host, and every run on it, without space.
The workspace is an ordinary directory (no quota or filesystem of its own, and no root
needed to run the agent), so its growth is measured: the tree's allocated size before
the setup, then again a few times a second while it runs. Past the limit the watch sets
the event on which `run_command` kills the setup's whole process tree (like at the time
limit). A writer faster than the checks overshoots by what it writes between two of
them; the setup's private /tmp is a tmpfs capped at the same size (`tmp_size_bytes`).
On a large tree (node_modules) a walk takes a while: the pause between walks is at
least twice the last walk, so the watch never takes more than a third of a core.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import stat
import time
from pathlib import Path
from types import TracebackType

__all__ = ["DiskWatch", "tree_bytes"]

_CHECK_INTERVAL_SECONDS = 0.2


def tree_bytes(root: Path) -> int:
    """Bytes allocated under `root` (as `du` counts: blocks, hard links once, no symlink followed).

    Files that vanish while it walks are skipped: the setup is writing as it is measured.
    """
    total = 0
    seen: set[tuple[int, int]] = set()
    pending = [str(root)]
    while pending:
        directory = pending.pop()
        try:
            entries = list(os.scandir(directory))
        except OSError:
            continue
        for entry in entries:
            try:
                info = entry.stat(follow_symlinks=False)
            except OSError:
                continue
            if stat.S_ISDIR(info.st_mode):
                pending.append(entry.path)
            if info.st_nlink > 1 and not stat.S_ISDIR(info.st_mode):
                if (info.st_dev, info.st_ino) in seen:
                    continue
                seen.add((info.st_dev, info.st_ino))
            total += info.st_blocks * 512
    return total


class DiskWatch:
    """`async with DiskWatch(workspace, limit) as watch:` pass `watch.stop` to `run_command`.

    `exceeded` tells afterwards whether the limit was what ended the command.
    """

    def __init__(self, root: Path, limit_bytes: int, interval: float = _CHECK_INTERVAL_SECONDS) -> None:
        self._root = root
        self._limit = limit_bytes
        self._interval = interval
        self._baseline = 0
        self._task: asyncio.Task[None] | None = None
        self.stop = asyncio.Event()
        self.exceeded = False
        self.checks = 0  # walks done so far (for the log and the tests)

    async def __aenter__(self) -> DiskWatch:
        self._baseline = await asyncio.to_thread(tree_bytes, self._root)
        self._task = asyncio.create_task(self._watch())
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task

    async def _watch(self) -> None:
        pause = self._interval
        while True:
            await asyncio.sleep(pause)  # a poll period, not a wait for an event
            started = time.monotonic()
            grown = await asyncio.to_thread(tree_bytes, self._root) - self._baseline
            pause = max(self._interval, 2 * (time.monotonic() - started))
            self.checks += 1
            if grown > self._limit:
                self.exceeded = True
                self.stop.set()
                return

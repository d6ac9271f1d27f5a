"""`coding-agent` under tracemalloc, for `bench_soak.py --trace`: what grows in `serve`.

Run as `python _soak_trace.py TRACE_DIR serve --config FILE`. On SIGUSR1 this process
collects its garbage and reads the name N in `TRACE_DIR/next`; it writes where its memory
is (`N.heap`: glibc's heap, SQLite's) and the count of the objects the garbage collector
tracks, by type (`N.types`, frozen ones left out). Once `TRACE_DIR/start` exists, the
signal starts tracemalloc, and every later one writes its snapshot (`N.snapshot`): the
blocks allocated since then and still alive. `N.done` says N is written. Tracing starts
late because tracemalloc makes the imports of `serve` minutes long on a loaded machine,
and what grows per task comes after them anyway. A debugging
aid for the benchmark only: the package knows nothing of it.
"""

from __future__ import annotations

import ctypes
import gc
import json
import os
import pickle
import re
import signal
import sys
import tempfile
import tracemalloc
from collections import Counter
from pathlib import Path
from types import FrameType
from typing import Any

FRAMES = 10


def _type_counts() -> Counter[str]:
    return Counter(f"{type(thing).__module__}.{type(thing).__qualname__}" for thing in gc.get_objects())


class _MallInfo2(ctypes.Structure):
    _fields_ = [
        (name, ctypes.c_size_t)
        for name in ("arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks", "fsmblks", "uordblks", "fordblks", "keepcost")
    ]


def _heap() -> dict[str, Any]:
    """Where the process's memory is, in kB: glibc's heap (in use, free in it, mmapped
    blocks) and SQLite's own allocations (its page caches), which tracemalloc never sees."""
    import _sqlite3

    libc = ctypes.CDLL("libc.so.6")
    libc.mallinfo2.restype = _MallInfo2
    info = libc.mallinfo2()
    sqlite = ctypes.CDLL(_sqlite3.__file__)
    sqlite.sqlite3_memory_used.restype = ctypes.c_int64
    return {
        "malloc_in_use_kb": info.uordblks // 1024,
        "malloc_free_kb": info.fordblks // 1024,
        "malloc_mmapped_kb": info.hblkhd // 1024,
        "sqlite_kb": sqlite.sqlite3_memory_used() // 1024,
        "gc_tracked_objects": len(gc.get_objects()),
        **_pymalloc(),
        **_caches(),
    }


def _pymalloc() -> dict[str, Any]:
    """Python's own small-object allocator (its arenas are mapped apart from glibc's heap,
    so `mallinfo2` never counts them), in kB: the arenas mapped and the most ever mapped
    at once, the blocks in use in them, the blocks free in their pools, and those free
    bytes for the six block sizes with the most (`sys._debugmallocstats`, which writes
    to fd 2)."""
    with tempfile.TemporaryFile() as report:
        sys.stderr.flush()
        saved = os.dup(2)
        os.dup2(report.fileno(), 2)
        try:
            sys._debugmallocstats()
        finally:
            os.dup2(saved, 2)
            os.close(saved)
        report.seek(0)
        text = report.read().decode("ascii", "replace")

    def figure(label: str) -> int:
        found = re.search(rf"^# {label}\s*=\s*([0-9,]+)", text, re.MULTILINE)
        return int(found[1].replace(",", "")) if found else -1

    # A row per size class (`class size num-pools blocks-in-use avail-blocks`): when the
    # arenas grow and the blocks in use stay level, the growth is free blocks, and their
    # size says what kind of object scatters them.
    free_by_size = {
        int(size): int(avail) * int(size) // 1024
        for size, avail in re.findall(r"^\s*\d+\s+(\d+)\s+\d+\s+\d+\s+(\d+)\s*$", text, re.MULTILINE)
    }
    largest = sorted(free_by_size.items(), key=lambda item: item[1], reverse=True)[:6]
    return {
        "pymalloc_free_kb_by_block_size": {str(size): kb for size, kb in largest},
        "pymalloc_arenas_kb": figure("arenas allocated current") * 1024,
        "pymalloc_arenas_highwater_kb": figure("arenas highwater mark") * 1024,
        "pymalloc_in_use_kb": figure("bytes in allocated blocks") // 1024,
        "pymalloc_free_kb": figure("bytes in available blocks") // 1024,
    }


def _caches() -> dict[str, int]:
    """The sizes of the process's bounded caches, each a suspect of growth per task: the
    forges' answer caches (entries, bytes), the GitHub client's parsed pages (their bodies'
    bytes), the dashboard's memo of task keys, SQLAlchemy's compiled statements and the
    database connections pooled (each with its own SQLite page cache)."""
    from sqlalchemy.engine import Engine

    from coding_agent.sources.github.client import GitHubClient
    from coding_agent.sources.http import ETagCache
    from coding_agent.web import views

    found = {"etag_entries": 0, "etag_kb": 0, "parsed_pages": 0, "parsed_pages_kb": 0, "sql_compiled": 0, "db_connections": 0}
    for thing in gc.get_objects():
        # By `type`, not `isinstance`: that asks an object's `__class__`, and the openai
        # SDK's lazy proxies import their modules to answer (1,535 of them: about +45 MB).
        kind = type(thing)
        if issubclass(kind, Engine):
            found["sql_compiled"] += len(thing._compiled_cache or ())
            found["db_connections"] += thing.pool.checkedin() + thing.pool.checkedout()
        elif issubclass(kind, ETagCache):
            found["etag_entries"] += len(thing)
            found["etag_kb"] += thing.retained_bytes // 1024
        elif issubclass(kind, GitHubClient):
            found["parsed_pages"] += len(thing._pages)
            found["parsed_pages_kb"] += sum(len(body) for body, _ in thing._pages.values()) // 1024
    found["views_what_memo"] = views._what.cache_info().currsize
    return found


def _dump(directory: Path) -> None:
    name = (directory / "next").read_text().strip()
    gc.collect()
    (directory / f"{name}.heap").write_text(json.dumps(_heap()))
    with (directory / f"{name}.types").open("wb") as handle:
        pickle.dump(dict(_type_counts()), handle)
    if tracemalloc.is_tracing():
        snapshot = tracemalloc.take_snapshot().filter_traces(
            [tracemalloc.Filter(False, tracemalloc.__file__), tracemalloc.Filter(False, __file__)]
        )
        snapshot.dump(str(directory / f"{name}.snapshot"))
    elif (directory / "start").exists():
        tracemalloc.start(FRAMES)
    (directory / f"{name}.done").touch()


def main() -> None:
    directory = Path(sys.argv[1])

    def on_signal(signum: int, frame: FrameType | None) -> None:
        _dump(directory)

    signal.signal(signal.SIGUSR1, on_signal)
    from coding_agent.cli import app

    sys.argv = ["coding-agent", *sys.argv[2:]]
    sys.exit(app())


if __name__ == "__main__":
    main()

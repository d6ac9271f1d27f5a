"""Giving the C allocator's free pages back to the system when a process goes idle.

A long `serve` or `worker` frees most of what a run allocated when the run ends, but
glibc's `malloc` keeps the freed pages: inside its heaps (one per thread that
allocated: the worker threads of `asyncio.to_thread`, the dashboard's thread pool) a
free page below a block still in use is never returned by itself. Measured with
`benchmarks/bench_soak.py`, such pages are about a sixth of the resident set of `serve`
and their number creeps up with the runs worked (docs/performance.md has the figures).
`malloc_trim(0)` hands every whole free page back (`madvise(MADV_DONTNEED)`), in every
heap; it moves nothing and frees nothing still in use, so it is safe at any moment and
costs a few milliseconds. Elsewhere than glibc (musl, macOS) there is nothing to call.
"""

from __future__ import annotations

import ctypes
import functools
from collections.abc import Callable

__all__ = ["give_back_free_memory"]


@functools.lru_cache(maxsize=1)
def _malloc_trim() -> Callable[[int], int] | None:
    """glibc's `malloc_trim`, or None where the C library has none."""
    try:
        # The symbols the interpreter is linked with, libc's among them; a CDLL's calls
        # release the GIL, so other threads go on while it trims.
        trim = ctypes.CDLL(None).malloc_trim
    except (OSError, AttributeError):
        return None
    trim.argtypes = [ctypes.c_size_t]
    trim.restype = ctypes.c_int
    return trim


def give_back_free_memory() -> None:
    """Return the allocator's whole free pages to the system (nothing where the C library
    is not glibc). Blocking for milliseconds: call it in a thread."""
    trim = _malloc_trim()
    if trim is not None:
        trim(0)

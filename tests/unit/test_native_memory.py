"""`give_back_free_memory`: the free pages the C allocator keeps go back to the system."""

from __future__ import annotations

import platform
import threading

import pytest

from coding_agent.runtime.native_memory import give_back_free_memory

BLOCK = 2048  # above pymalloc's 512 bytes: straight from malloc, as native libraries allocate
BLOCKS = 40_000  # 80 MB


def _resident_kb() -> int:
    with open("/proc/self/status", encoding="ascii") as status:
        return next(int(line.split()[1]) for line in status if line.startswith("VmRSS:"))


def _fragment(kept: list[bytes]) -> None:
    """80 MB allocated, one block in 20 kept: the pages between them are free but, each
    heap's top held by a block in use, stay with the process."""
    blocks = [bytes(BLOCK) for _ in range(BLOCKS)]
    kept.extend(blocks[::20])
    kept.append(bytes(BLOCK))


@pytest.mark.skipif(platform.libc_ver()[0] != "glibc", reason="malloc_trim is glibc's")
def test_the_pages_freed_in_a_worker_thread_s_heap_go_back_to_the_system() -> None:
    kept: list[bytes] = []
    worker = threading.Thread(target=_fragment, args=(kept,))  # its own glibc heap, as `asyncio.to_thread`'s
    worker.start()
    worker.join()
    before = _resident_kb()
    give_back_free_memory()
    given_back_mb = (before - _resident_kb()) / 1024
    assert given_back_mb > 40, f"{given_back_mb:.1f} MB given back"
    assert len(kept) == BLOCKS // 20 + 1 and all(len(block) == BLOCK for block in kept)  # what is in use stays


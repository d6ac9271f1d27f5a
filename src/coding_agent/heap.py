"""Keep the garbage collector's full passes short: what the process imported once, for
its whole life, is frozen out of their way.

A worker holds about 230,000 objects that live as long as it does, most of them the
classes and schemas of githubkit, the openai SDK and the MCP SDK. Every full pass of the
cyclic garbage collector (a few per busy minute) walks all of them while every thread of
the process waits: on a 2-core VM a pause of 150-240 ms, in which no run takes a step,
no lease is renewed and no webhook is answered. It was the event loop's worst lag in
`benchmarks/bench_runtime.py` (16 tasks at once: max 150-240 ms; p99 14-19 ms).

`settle_heap` runs once per process, when what runs use has been imported (by
`agent/run_libraries.py`, right after it): a collection of the young generations, then
`gc.freeze`, which moves every tracked object into a generation the collector never
walks again. Later full passes walk only what runs create since: 14-46 ms measured the
same way.

Not a full collection first: it would be one of the very pauses this avoids (61 ms here,
up to 170 ms on a loaded VM, the GIL held throughout, in whichever thread runs it), and
right after the imports it finds almost nothing (45 unreachable objects of 175,000).
Those few, and any object frozen here that later becomes part of an unreachable cycle,
are never freed. What is tracked at that moment is the imported modules, the service's
own parts and at most a few starting runs, so that costs little, and only once.
"""

from __future__ import annotations

import gc
import threading

__all__ = ["settle_heap"]

_lock = threading.Lock()
_settled = False


def settle_heap() -> bool:
    """Collect the young generations and freeze what is left, the first time it is called;
    later calls do nothing (each would freeze the live objects of the runs of the moment).
    Returns whether this call did it."""
    global _settled
    with _lock:
        if _settled:
            return False
        _settled = True
    gc.collect(1)
    gc.freeze()
    return True

"""`coding-agent` under tracemalloc, for `bench_soak.py --trace`: what grows in `serve`.

Run as `python _soak_trace.py TRACE_DIR serve --config FILE`. On SIGUSR1 this process
collects its garbage and reads the name N in `TRACE_DIR/next`; it writes the count of the
objects the garbage collector tracks, by type (`N.types`, frozen ones left out), and
then, the first time, starts tracemalloc, and at every later signal writes its snapshot
(`N.snapshot`): the blocks allocated since the first signal and still alive. `N.done`
says it is written. Tracing starts late because tracemalloc makes the imports of `serve`
minutes long on a loaded machine, and what grows per task comes after them anyway. A
debugging aid for the benchmark only: the package knows nothing of it.
"""

from __future__ import annotations

import gc
import pickle
import signal
import sys
import tracemalloc
from collections import Counter
from pathlib import Path
from types import FrameType

FRAMES = 20


def _type_counts() -> Counter[str]:
    return Counter(f"{type(thing).__module__}.{type(thing).__qualname__}" for thing in gc.get_objects())


def _dump(directory: Path) -> None:
    name = (directory / "next").read_text().strip()
    gc.collect()
    with (directory / f"{name}.types").open("wb") as handle:
        pickle.dump(dict(_type_counts()), handle)
    if not tracemalloc.is_tracing():
        tracemalloc.start(FRAMES)
    else:
        snapshot = tracemalloc.take_snapshot().filter_traces(
            [tracemalloc.Filter(False, tracemalloc.__file__), tracemalloc.Filter(False, __file__)]
        )
        snapshot.dump(str(directory / f"{name}.snapshot"))
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

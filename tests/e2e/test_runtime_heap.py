"""A worker's first run freezes what the process imported for its whole life out of the
garbage collector's full passes (`coding_agent/heap.py`), so that those passes, which stop
every run, heartbeat and webhook of the process, walk only what runs create.

Counted, not timed: in a fresh process that works one task (the demo), the objects
frozen and the objects a full pass still walks afterwards. Without the freeze nothing is
frozen and a full pass walks everything (about 230,000 objects)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

_ONE_TASK_THEN_COUNT = """
import contextlib, gc, io, json
from coding_agent.demo import run_demo
from coding_agent.heap import settle_heap

frozen_before = gc.get_freeze_count()
with contextlib.redirect_stdout(io.StringIO()):
    code = run_demo(None, None)
gc.collect()
print(json.dumps({
    "code": code,
    "frozen_before": frozen_before,
    "frozen": gc.get_freeze_count(),
    "walked": len(gc.get_objects()),
    "settled_again": settle_heap(),
    "frozen_after_again": gc.get_freeze_count(),
}))
"""


def test_a_worker_s_first_run_freezes_the_imported_heap_once(tmp_path: Path) -> None:
    result = subprocess.run(
        [sys.executable, "-c", _ONE_TASK_THEN_COUNT],
        cwd=tmp_path,
        env={**os.environ, "TMPDIR": str(tmp_path)},
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    counts = json.loads(result.stdout.strip().splitlines()[-1])
    assert counts["code"] == 0, "the demo's task ended done"
    assert counts["frozen_before"] == 0
    assert counts["frozen"] > 100_000, "the libraries' objects were frozen when the run began"
    assert counts["walked"] < counts["frozen"] / 3, "a full pass walks only what came after"
    assert counts["settled_again"] is False and counts["frozen_after_again"] == counts["frozen"], "only once"

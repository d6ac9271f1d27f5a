"""A `serve` lives for thousands of tasks: once a task has ended, the process keeps
nothing of it in memory (its record is in the state store). Anything kept per task grows
the process without end (`benchmarks/bench_soak.py` measures the curve)."""

from __future__ import annotations

import asyncio
import gc
from pathlib import Path

from coding_agent.agent.runner import RunResult
from coding_agent.runtime.service import AgentService
from coding_agent.sandbox.replay_model import ReplaySandbox
from tests.support.waiting import wait_until

from ._steering import steering_config
from .conftest import HELLO_SCRIPT, GitHubForge, load_for_service


def _results() -> list[RunResult]:
    gc.collect()
    return [thing for thing in gc.get_objects() if isinstance(thing, RunResult)]


def test_serve_holds_no_result_of_a_task_that_has_ended(github_forge: GitHubForge, tmp_path: Path) -> None:
    numbers = [github_forge.open_task("issue", f"Task {n}", "Please add hello.txt.") for n in range(3)]
    with ReplaySandbox(HELLO_SCRIPT) as model:
        setup = steering_config(tmp_path, [github_forge], model, workers=2, scheduling={"interval_seconds": 0.2})

        async def results_alive_while_serving() -> list[RunResult]:
            service = AgentService(load_for_service(setup))
            ended: list[str] = []
            service.workers.on_event = lambda event, key: ended.append(key) if event == "ended" else None
            stop = asyncio.Event()
            serving = asyncio.create_task(service.serve(stop))
            try:
                await wait_until(lambda: len(ended) >= 3 or serving.done(), 180, "the three tasks to end")
                # A slot finishes its bookkeeping after the run's end (its queue entry, the
                # allocator's free pages) holding the result it returns; then it lets go.
                await wait_until(lambda: not _results() or serving.done(), 60, "the ended tasks' results let go")
                return _results()
            finally:
                stop.set()
                await serving
                await service.aclose()

        alive = asyncio.run(asyncio.wait_for(results_alive_while_serving(), 240))
    assert alive == []
    for number in numbers:
        assert [label for label in github_forge.labels("issue", number) if label.startswith("coding agent")] == [
            "coding agent done"
        ]

"""The dashboard with 1,000 tasks in the store (SPEC 11.3, 13).

Targets: `GET /api/tasks` and the list page `GET /` answer under 100 ms median, and the
live list costs the event loop under 1 ms per update.

1. A SQLite state store with 1,000 tasks written through the store's own methods: runs
   in every state with token usage, titles and links (`note_task`), PR links for the
   done ones, final comments for the stopped ones, and 50 keys waiting in the queue.
2. The dashboard served by the real server (`serving_dashboard`, uvicorn) in this
   process; an httpx client asks each page `ROUNDS` times (after one warm-up). Requests
   within half a second of another share its read of the store (`web/feed.py`), as
   browsers and scripts polling the dashboard do; the p95 is a request that reads.
   `fresh_read`: one read and encoding of the whole list (what such a request adds),
   timed alone.
3. The live list (`dashboard.list_updates`, what `/events` streams) over `UPDATES`
   updates, a run's steps changing before each: the event loop's CPU time (the main
   thread's `time.thread_time`; the store read and the rendering run in worker threads)
   divided by the updates sent.

Run: `python benchmarks/bench_dashboard.py`
"""

from __future__ import annotations

import asyncio
import json
import tempfile
import time
from pathlib import Path

import httpx
from _common import emit, summary_ms

from coding_agent.config import parse_config
from coding_agent.redaction import Redactor
from coding_agent.store.queue_entries import QueueEntries
from coding_agent.store.state import StateStore
from coding_agent.web.feed import ListFeed, list_updates
from coding_agent.web.server import serving_dashboard
from coding_agent.web.views import TaskFilter, task_list

TASKS = 1000
WAITING = 50
ROUNDS = 30
UPDATES = 40
STATES = ("done", "failed", "stopped", "paused", "running")


def seed(store: StateStore) -> str:
    """1,000 tasks; returns the key of a running one (its steps change during the stream)."""
    running = ""
    for number in range(1, TASKS + 1):
        key = f"github:acme/repo{number % 20}#{number}"
        store.tasks.note_task(key, f"Task number {number}: do the thing ✓", f"https://github.example/acme/repo{number % 20}/issues/{number}")
        if number > TASKS - WAITING:
            continue
        run, status = f"run-{number}", STATES[number % len(STATES)]
        store.runs.start_run(run, key, "worker-a", f"user{number % 12}")
        store.runs.heartbeat(key, "worker-a", 600, run, steps=number % 40, usages=[(1000 + number, 100 + number)])
        if status == "paused":
            store.steering.pause_run(run, number % 40, hold=True)
        elif status == "running":
            running = key
        else:
            if status == "stopped":
                store.steering.record_final(run, "stopped", "## ⛔ Task stopped\n\nAn operator stopped the coding agent.")
            if status == "done":
                store.tasks.note_change(key, f"https://github.example/acme/repo{number % 20}/pull/{number + 5000}")
            store.runs.finish_run(run, status, number % 40, "The model was stuck." if status == "failed" else None)
    entries = QueueEntries(store.engine, "memory:bench", stale_seconds=3600)
    for number in range(TASKS - WAITING + 1, TASKS + 1):
        entries.try_enqueue(f"github:acme/repo{number % 20}#{number}")
    return running


async def timed_gets(url: str, path: str) -> dict[str, float | int]:
    """Wall time per request, and this process's CPU time per request (client and server:
    less moved by other processes on a loaded machine than the wall time)."""
    async with httpx.AsyncClient(base_url=url, timeout=30) as client:
        (await client.get(path)).raise_for_status()  # warm-up
        seconds = []
        cpu = time.process_time()
        for _ in range(ROUNDS):
            started = time.perf_counter()
            (await client.get(path)).raise_for_status()
            seconds.append(time.perf_counter() - started)
        cpu = time.process_time() - cpu
    return {**summary_ms(seconds), "process_cpu_ms_per_request": round(cpu / ROUNDS * 1000, 3)}


def fresh_reads(store: StateStore) -> dict[str, float | int]:
    """The list read from the store and encoded as the API sends it, `ROUNDS` times."""
    redactor = Redactor([])
    seconds = []
    for _ in range(ROUNDS):
        started = time.perf_counter()
        json.dumps({"tasks": task_list(store, redactor)})
        seconds.append(time.perf_counter() - started)
    return summary_ms(seconds)


async def loop_cost_per_update(store: StateStore, running_key: str) -> dict[str, float | int]:
    """The main thread's CPU time per live-list update (store read and render: threads)."""
    redactor = Redactor([])
    feed = ListFeed(lambda: task_list(store, redactor), interval=0.0)
    run = store.runs.latest_run(running_key)
    assert run is not None

    async def connected() -> bool:
        return True

    updates = list_updates(feed, TaskFilter(), connected, interval=0.0)
    await anext(updates)
    loop_seconds = 0.0
    sizes = []
    for step in range(UPDATES):
        await asyncio.to_thread(store.runs.heartbeat, running_key, "worker-a", 600, run.uuid, 100 + step)
        started = time.thread_time()
        event = await anext(updates)
        loop_seconds += time.thread_time() - started
        sizes.append(len(event))
    await updates.aclose()
    return {"updates": UPDATES, "loop_cpu_ms_per_update": round(loop_seconds / UPDATES * 1000, 3), "event_bytes": max(sizes)}


async def main() -> None:
    with tempfile.TemporaryDirectory() as directory:
        config = parse_config(
            {
                "task_source": "github",
                "github": {"owner": "acme", "token": "t"},
                "llm": {"provider": "openai", "openai": {"model": "m"}},
                "database": {"url": f"sqlite:///{Path(directory) / 'state.db'}"},
                "context_storage": {"base_dir": str(Path(directory) / "contexts")},
                "dashboard": {"bind": "127.0.0.1:0"},
            },
            env={},
        )
        store = StateStore(config.database.url)
        started = time.perf_counter()
        running_key = await asyncio.to_thread(seed, store)
        seeded = time.perf_counter() - started
        async with serving_dashboard(config, store) as url:
            assert url is not None
            api = await timed_gets(url, "/api/tasks")
            page = await timed_gets(url, "/")
            filtered = await timed_gets(url, "/?state=running")
        stream = await loop_cost_per_update(store, running_key)
        fresh = fresh_reads(store)
        store.close()
    emit(
        {
            "benchmark": "dashboard",
            "tasks": TASKS,
            "waiting": WAITING,
            "seed_seconds": round(seeded, 1),
            "get_api_tasks": api,
            "get_list_page": page,
            "get_list_page_filtered_running": filtered,
            "fresh_read": fresh,
            "live_list": stream,
            "targets": {"median_ms": 100, "loop_cpu_ms_per_update": 1},
        }
    )


if __name__ == "__main__":
    asyncio.run(main())

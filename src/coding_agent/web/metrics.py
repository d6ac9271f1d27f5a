"""`/healthz` and `/metrics` (Prometheus text format, via prometheus_client).

The figures are read from the state store at scrape time by a custom collector, so they
are right for every process sharing the store and nothing has to be counted twice. Each
app gets its own registry (no global state: several apps in one test process are fine).

`coding_agent_forge_requests_total` is the exception: forge HTTP requests are counted
where they are sent, in `sources/http.py` (the one HTTP layer both forges share), by this
process; the counter belongs to no registry there and is registered in each app's here.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterator

from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.registry import Collector
from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from coding_agent.runtime.state_store import StateStore
from coding_agent.sources.http import FORGE_REQUESTS

__all__ = ["health_routes"]

STATES = ("running", "paused", "done", "failed", "stopped")


class _StoreCollector(Collector):
    def __init__(self, store: StateStore, queue_depth: Callable[[], int | None]) -> None:
        self._store = store
        self._queue_depth = queue_depth

    def collect(self) -> Iterator[GaugeMetricFamily | CounterMetricFamily]:
        latest: dict[str, str] = {}
        runs = self._store.runs()
        for record in runs:
            latest[record.task_key] = record.status
        tasks = GaugeMetricFamily("coding_agent_tasks", "Tasks by the state of their latest run", labels=["state"])
        counts = Counter(latest.values())
        for state in sorted(set(STATES) | set(counts)):
            tasks.add_metric([state], counts.get(state, 0))
        yield tasks
        total = CounterMetricFamily("coding_agent_runs", "Runs started, by status", labels=["status"])
        for status, count in sorted(Counter(record.status for record in runs).items()):
            total.add_metric([status], count)
        yield total
        tokens = CounterMetricFamily("coding_agent_llm_tokens", "LLM tokens used", labels=["kind"])
        tokens.add_metric(["prompt"], sum(record.prompt_tokens for record in runs))
        tokens.add_metric(["completion"], sum(record.completion_tokens for record in runs))
        yield tokens
        depth = self._queue_depth()
        if depth is not None:
            gauge = GaugeMetricFamily("coding_agent_queue_depth", "Task keys waiting in the queue")
            gauge.add_metric([], depth)
            yield gauge


def health_routes(store: StateStore, queue_depth: Callable[[], int | None] = lambda: None) -> list[Route]:
    registry = CollectorRegistry(auto_describe=False)
    registry.register(_StoreCollector(store, queue_depth))
    registry.register(FORGE_REQUESTS)

    async def healthz(request: Request) -> Response:
        return JSONResponse({"status": "ok"})

    async def metrics(request: Request) -> Response:
        body = await run_in_threadpool(generate_latest, registry)
        return Response(body, media_type=CONTENT_TYPE_LATEST)

    return [Route("/healthz", healthz, methods=["GET"]), Route("/metrics", metrics, methods=["GET"])]

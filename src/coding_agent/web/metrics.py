"""`/healthz` and `/metrics` (Prometheus text format, via prometheus_client).

The figures are read from the state store at scrape time by a custom collector, so they
are right for every process sharing the store and nothing has to be counted twice. Each
app gets its own registry (no global state: several apps in one test process are fine).

`coding_agent_forge_requests_total` and `coding_agent_model_request_duration_seconds` are
the exceptions: forge HTTP requests are counted where they are sent, in `sources/http.py`
(the one HTTP layer both forges share), and model requests timed in `llm/base.py`, by this
process; they belong to no registry there and are registered in each app's here.

Runs by state are a gauge (a run moves from running to done: the count goes down); runs
that ended are a counter by outcome (it only grows, so `rate()` works on it).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterator

from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily, Metric
from prometheus_client.registry import Collector
from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from coding_agent.llm.base import MODEL_LATENCY
from coding_agent.sources.http import FORGE_REQUESTS
from coding_agent.store.state import StateStore

__all__ = ["health_routes"]

RUN_STATES = ("running", "paused", "done", "failed", "stopped", "abandoned")
ENDED = ("done", "failed", "stopped", "abandoned")
TASK_STATES = ("waiting", *RUN_STATES)
DURATION_BUCKETS = (10.0, 30.0, 60.0, 120.0, 300.0, 600.0, 1200.0, 1800.0, 3600.0, 7200.0, 14400.0)
STEP_BUCKETS = (1.0, 2.0, 5.0, 10.0, 20.0, 30.0, 50.0, 75.0, 100.0, 150.0, 200.0)


def _histogram(
    name: str, documentation: str, buckets: tuple[float, ...], samples: dict[str, list[float]]
) -> HistogramMetricFamily:
    """A histogram by outcome of `samples` (outcome -> values), its buckets counted now."""
    family = HistogramMetricFamily(name, documentation, labels=["outcome"])
    for outcome in ENDED:
        values = samples.get(outcome, [])
        cumulative = [(str(bound), float(sum(1 for value in values if value <= bound))) for bound in buckets]
        family.add_metric([outcome], [*cumulative, ("+Inf", float(len(values)))], sum(values))
    return family


def _by_state(name: str, documentation: str, states: tuple[str, ...], counts: Counter[str]) -> Metric:
    """A gauge with one sample per state of `states` (0 for those with none): the label's
    values are a fixed set, whatever the store holds."""
    family = GaugeMetricFamily(name, documentation, labels=["state"])
    for state in states:
        family.add_metric([state], counts.get(state, 0))
    return family


class _StoreCollector(Collector):
    """Figures read from the state store at scrape time. Label values are states and
    outcomes the code writes (a fixed set), never user text."""

    def __init__(self, store: StateStore, queue_depth: Callable[[], int | None]) -> None:
        self._store = store
        self._queue_depth = queue_depth

    def collect(self) -> Iterator[Metric]:
        runs = self._store.runs.all()
        queued = [key for key, _ in self._store.tasks.queued_tasks()]
        latest: dict[str, str] = {record.task_key: record.status for record in runs}
        latest.update({key: "waiting" for key in queued})
        tasks_help = "Tasks by the state of their latest run (waiting: queued, not yet taken)"
        yield _by_state("coding_agent_tasks", tasks_help, TASK_STATES, Counter(latest.values()))
        yield _by_state("coding_agent_runs", "Runs by their state now", RUN_STATES, Counter(run.status for run in runs))
        ended = [record for record in runs if record.status in ENDED and record.finished_at is not None]
        finished = CounterMetricFamily("coding_agent_runs_finished", "Runs that ended, by outcome", labels=["outcome"])
        outcomes = Counter(record.status for record in ended)
        for outcome in ENDED:
            finished.add_metric([outcome], outcomes.get(outcome, 0))
        yield finished
        durations: dict[str, list[float]] = {}
        steps: dict[str, list[float]] = {}
        for record in ended:
            durations.setdefault(record.status, []).append(max(0.0, (record.finished_at or 0.0) - record.started_at))
            steps.setdefault(record.status, []).append(float(record.steps))
        duration_help = "Wall time of ended runs, by outcome"
        yield _histogram("coding_agent_run_duration_seconds", duration_help, DURATION_BUCKETS, durations)
        yield _histogram("coding_agent_run_steps", "Steps (LLM turns) per ended run, by outcome", STEP_BUCKETS, steps)
        tokens = CounterMetricFamily("coding_agent_llm_tokens", "LLM tokens used", labels=["kind"])
        tokens.add_metric(["prompt"], sum(record.prompt_tokens for record in runs))
        tokens.add_metric(["completion"], sum(record.completion_tokens for record in runs))
        yield tokens
        depth = self._queue_depth()
        gauge = GaugeMetricFamily("coding_agent_queue_depth", "Task keys waiting in the queue")
        gauge.add_metric([], len(queued) if depth is None else depth)
        yield gauge


def health_routes(
    store: StateStore,
    queue_depth: Callable[[], int | None] = lambda: None,
    shutting_down: Callable[[], bool] = lambda: False,
) -> list[Route]:
    """`/healthz` answers 503 once `shutting_down` says so (SPEC 8.3): a load balancer then
    stops sending webhooks to a process that takes no more work."""
    registry = CollectorRegistry(auto_describe=False)
    registry.register(_StoreCollector(store, queue_depth))
    registry.register(FORGE_REQUESTS)
    registry.register(MODEL_LATENCY)

    async def healthz(request: Request) -> Response:
        if shutting_down():
            return JSONResponse({"status": "shutting down"}, status_code=503)
        return JSONResponse({"status": "ok"})

    async def metrics(request: Request) -> Response:
        body = await run_in_threadpool(generate_latest, registry)
        return Response(body, media_type=CONTENT_TYPE_LATEST)

    return [Route("/healthz", healthz, methods=["GET"]), Route("/metrics", metrics, methods=["GET"])]

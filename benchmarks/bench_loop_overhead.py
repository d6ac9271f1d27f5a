"""Host overhead per loop step, with a zero-latency replay model (target: under 5 ms median).

A real task runs end to end through `AgentService.run_cycle`: a labelled issue on the
sandbox GitHub, the replay model over HTTP (OpenAI provider), the built-in workspace MCP
server over stdio, the SQLite state store, file logging and context files, with the
default configuration. The script asks for one cheap tool call per step
(`workspace/view` of a small file, a range that varies so that the loop guard has
nothing to stop), 40 steps, then `done`.

A step is the time between two `ITERATION_START` steering checkpoints (the last one ends
when `run_loop` returns). From each step's wall time the script subtracts what the host
does not control, as the union of their time intervals (so nothing is subtracted twice):

- the model's HTTP time as the client measures it (`LLMReply.duration_seconds`),
- every forge request (githubkit's `httpx.AsyncClient.send`): step comments, progress
  comment edits, steering's checks for new comments,
- the tool's time (`ToolResult.duration_seconds`, from the hub).

What is left is host overhead: reply parsing, history and request building, context
files and checkpoints, the state store's rows, logging, steering's own work.

Wall time on a loaded machine is mostly waiting for a CPU, so each step's CPU time is
reported too (`host_cpu`): this process's CPU time (`time.process_time`, every thread)
over the step, less the CPU time spent inside the tool's call. The model and the forge
run in the child process, so their servers' work is not in it; the client side of their
requests (the OpenAI SDK, githubkit, the forge layer) is, being the host's own work.

The timing wrappers are installed on classes in this script's process only (nothing in
the package is changed); each costs about a microsecond per call. The forge and the model
run in a child process by default: in real use they are remote, and in this process
their server threads would compete with the host for the GIL.

Variants: both reply protocols (native tool calls, JSON in text), each without step
comments, with a comment per step as configured by default (folded into the progress
comment when that exists), and with a comment per step posted as its own comment
(`progress_comment.enabled: false`, when the config has that key).

With `--model-latency S` the replay model answers after S seconds (subtracted like any
model time): the steps are then as far apart as a real model's, and the new-comment
check (which looks a few seconds back, for clock skew) lists as many comments as in real
use rather than every step comment of the run, and the operator-request read of the
pause check (at most one per `REQUEST_READ_SECONDS`, 0.25 s) comes once a step instead
of once in about twenty (`operator_request_store_read`, in a worker thread).

Run: `python benchmarks/bench_loop_overhead.py [--steps 40] [--servers-in-process] [--model-latency 0]`
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import functools
import importlib
import inspect
import logging
import re
import statistics
import tempfile
import time
from collections import Counter, defaultdict
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any

import httpx
from _common import ServerProcess, emit, open_labelled_issues, seed_github, summary_ms

import coding_agent.agent.runner as runner_module
from coding_agent.agent.loop import Checkpoint, Decision, LoopOutcome, Oversight, Steering
from coding_agent.config import AgentConfig, parse_config
from coding_agent.llm.base import LLMClient
from coding_agent.llm.factory import create_llm_client
from coding_agent.llm.types import LLMReply, Message, ToolSpec
from coding_agent.logging_setup import LOG_FILE_NAME, configure_logging
from coding_agent.redaction import Redactor
from coding_agent.runtime.service import AgentService
from coding_agent.sandbox.github import GitHubSandbox
from coding_agent.sandbox.replay_model import ReplaySandbox
from coding_agent.sources.factory import retry_policy
from coding_agent.tools.hub import ToolHub
from coding_agent.tools.types import ToolResult

TARGET_MEDIAN_MS = 5.0
REPO = "bench/loop"
USER = "maintainer"
BOT = "bench-bot"
BOT_TOKEN = "bench-bot-token"
STEP_COMMENT = "Looking at notes.txt again."
FILE_TEXT = "".join(f"line {n}: the quick brown fox jumps over the lazy dog\n" for n in range(1, 21))

# Host parts timed for the breakdown (overhead, not subtracted): module, class, method,
# label. Parts the current code does not have are reported as absent, not an error.
BREAKDOWN: tuple[tuple[str, str, str, str], ...] = (
    ("coding_agent.context.storage", "RunContextFiles", "sync_messages", "context_sync_messages"),
    ("coding_agent.context.storage", "RunContextFiles", "record_tool_call", "context_record_tool_call"),
    ("coding_agent.agent.ledger", "RunLedger", "step", "state_store_heartbeat"),
    ("coding_agent.agent.ledger", "RunLedger", "record_usage", "state_store_usage"),
    ("coding_agent.agent.steering.state", "StateWriter", "checkpoint", "run_state_checkpoint_file"),
    ("coding_agent.agent.steering.interrupts", "StoreRequests", "__call__", "operator_request_store_read"),
)

Interval = tuple[float, float]


@dataclass
class Step:
    """What one loop step spent: its wall time and the intervals the host does not control."""

    started: float
    cpu_started: float
    wall: float = 0.0
    cpu: float = 0.0
    tool_cpu: float = 0.0
    llm: list[Interval] = field(default_factory=list)
    llm_client_seconds: float = 0.0
    llm_wire_seconds: float = 0.0
    forge: list[Interval] = field(default_factory=list)
    tool: list[Interval] = field(default_factory=list)
    steering: list[Interval] = field(default_factory=list)
    parts: dict[str, float] = field(default_factory=lambda: defaultdict(float))

    @property
    def overhead(self) -> float:
        return self.wall - _union_length([*self.llm, *self.forge, *self.tool])

    @property
    def host_cpu(self) -> float:
        """The process's CPU time over the step, less the tool's."""
        return self.cpu - self.tool_cpu

    @property
    def steering_host(self) -> float:
        """Time in the run's steering checkpoints, less their forge requests."""
        return sum(
            (stop - start) - _union_length([(max(start, a), min(stop, b)) for a, b in self.forge if a < stop and b > start])
            for start, stop in self.steering
        )


def _union_length(intervals: list[Interval]) -> float:
    total, end = 0.0, float("-inf")
    for start, stop in sorted(intervals):
        if stop <= end:
            continue
        total += stop - max(start, end)
        end = stop
    return total


def _length(intervals: list[Interval]) -> float:
    return sum(stop - start for start, stop in intervals)


class StepClock:
    """Step boundaries and what happened inside each step."""

    def __init__(self) -> None:
        self.steps: list[Step] = []
        self.in_llm = False
        self.wire_timed = True
        self.parts_absent: list[str] = []

    def mark(self) -> None:
        now, cpu = time.perf_counter(), time.process_time()
        self.finish(now, cpu)
        self.steps.append(Step(started=now, cpu_started=cpu))

    def finish(self, now: float | None = None, cpu: float | None = None) -> None:
        if self.steps and not self.steps[-1].wall:
            self.steps[-1].wall = (now or time.perf_counter()) - self.steps[-1].started
            self.steps[-1].cpu = (cpu or time.process_time()) - self.steps[-1].cpu_started

    @property
    def current(self) -> Step | None:
        return self.steps[-1] if self.steps and not self.steps[-1].wall else None


class TimedSteering:
    """The run's own steering, with the step boundary taken before it is consulted."""

    def __init__(self, inner: Steering, clock: StepClock) -> None:
        self._inner = inner
        self._clock = clock

    async def checkpoint(self, point: Checkpoint, llm: LLMClient) -> Decision:
        if point is Checkpoint.ITERATION_START:
            self._clock.mark()
        started = time.perf_counter()
        try:
            return await self._inner.checkpoint(point, llm)
        finally:
            if self._clock.current is not None:
                self._clock.current.steering.append((started, time.perf_counter()))


def instrument(clock: StepClock) -> None:
    """Install the timing wrappers on the loop's collaborators (the model: `_timed_client`)."""
    real_run_loop = runner_module.run_loop
    signature = inspect.signature(real_run_loop)

    @functools.wraps(real_run_loop)
    async def run_loop(*args: Any, **kwargs: Any) -> LoopOutcome:
        bound = signature.bind(*args, **kwargs)
        oversight = bound.arguments.get("oversight") or Oversight()
        bound.arguments["oversight"] = dataclasses.replace(oversight, steering=TimedSteering(oversight.steering, clock))
        try:
            return await real_run_loop(*bound.args, **bound.kwargs)
        finally:
            clock.finish()

    runner_module.run_loop = run_loop  # type: ignore[assignment]

    real_call = ToolHub.call

    async def call(self: ToolHub, name: str, args: dict[str, Any]) -> ToolResult:
        cpu = time.process_time()
        result = await real_call(self, name, args)
        if clock.current is not None:
            end = time.perf_counter()
            clock.current.tool.append((end - result.duration_seconds, end))
            clock.current.tool_cpu += time.process_time() - cpu
        return result

    ToolHub.call = call  # type: ignore[method-assign]

    real_send = httpx.AsyncClient.send

    async def send(self: httpx.AsyncClient, request: httpx.Request, **kwargs: Any) -> httpx.Response:
        started = time.perf_counter()
        try:
            return await real_send(self, request, **kwargs)
        finally:
            if not clock.in_llm and clock.current is not None:
                clock.current.forge.append((started, time.perf_counter()))

    httpx.AsyncClient.send = send  # type: ignore[method-assign]

    for module_name, class_name, method_name, label in BREAKDOWN:
        try:
            owner = getattr(importlib.import_module(module_name), class_name)
        except (ImportError, AttributeError):
            owner = None
        method = getattr(owner, method_name, None)
        if method is None or inspect.iscoroutinefunction(method):
            clock.parts_absent.append(label)
            continue
        setattr(owner, method_name, _timed_part(method, label, clock))


def _timed_part(method: Callable[..., Any], label: str, clock: StepClock) -> Callable[..., Any]:
    @functools.wraps(method)
    def timed(*args: Any, **kwargs: Any) -> Any:
        started = time.perf_counter()
        try:
            return method(*args, **kwargs)
        finally:
            if clock.current is not None:
                clock.current.parts[label] += time.perf_counter() - started

    return timed


def _timed_client(config: AgentConfig, clock: StepClock) -> LLMClient:
    """The configured client with its `_complete` timed: all of it, and its HTTP part."""
    client = create_llm_client(config.llm, retry_policy(config))
    real_complete = client._complete

    async def complete(messages: list[Message], tools: list[ToolSpec]) -> LLMReply:
        started = time.perf_counter()
        clock.in_llm = True
        try:
            reply = await real_complete(messages, tools)
        finally:
            clock.in_llm = False
        end = time.perf_counter()
        if clock.current is not None:
            clock.current.llm_client_seconds += end - started
            clock.current.llm.append((end - reply.duration_seconds, end))
        return reply

    client._complete = complete  # type: ignore[method-assign]
    _time_the_wire(client, clock)
    return client


def _time_the_wire(client: LLMClient, clock: StepClock) -> None:
    """Time the SDK's HTTP client's `send`: the model's wire time without the SDK's own work.

    Reaches into the OpenAI SDK (its HTTP client is `AsyncOpenAI._client`); when that
    shape changes the figure is reported as null rather than wrong.
    """
    http = getattr(getattr(client, "_client", None), "_client", None)
    real_send = getattr(http, "send", None)
    if real_send is None:
        clock.wire_timed = False
        return

    async def send(request: Any, **kwargs: Any) -> Any:
        started = time.perf_counter()
        try:
            return await real_send(request, **kwargs)
        finally:
            if clock.current is not None:
                clock.current.llm_wire_seconds += time.perf_counter() - started

    http.send = send


# --- the task and the servers -------------------------------------------------------------


def _script(steps: int, comment: str, model_latency: float = 0.0) -> dict[str, Any]:
    replies: list[dict[str, Any]] = [
        {"tool": "workspace/create", "args": {"path": "notes.txt", "content": FILE_TEXT}, "comment": comment}
    ]
    # Each view asks for a slightly different range: the same call with the same result in a
    # row is what the loop guard (SPEC 4) stops, and a benchmark must not measure a failure.
    replies += [
        {"tool": "workspace/view", "args": {"path": "notes.txt", "view_range": [1, 10 + step % 10]}, "comment": comment}
        for step in range(steps - 1)
    ]
    replies.append({"done": "Read notes.txt."})
    return {"replies": replies, "latency_seconds": model_latency}


def _config(urls: dict[str, str], directory: Path, function_calling: bool, extra: dict[str, Any]) -> AgentConfig:
    data = {
        "task_source": "github",
        "github": {"api_url": urls["forge_url"], "token": BOT_TOKEN, "owner": "bench", "bot_name": BOT},
        "llm": {
            "provider": "openai",
            "function_calling": function_calling,
            "openai": {"base_url": urls["model_url"], "api_key": "bench-key", "model": "replay"},
        },
        "max_llm_process_num": 1000,
        "workspace": {"base_dir": str(directory / "workspaces")},
        "context_storage": {"base_dir": str(directory / "contexts")},
        "logging": {"dir": str(directory / "logs"), "level": "INFO"},
        "database": {"url": f"sqlite:///{directory / 'state.db'}"},
        **extra,
    }
    return parse_config(data, source="bench_loop_overhead", env={})


def serve_forge_and_model(conn: Connection) -> None:
    """Serve the sandbox GitHub and the replay model; open a task per script asked for.

    Messages: `("task", script)` loads the script and answers the new issue's number,
    `("report", number)` answers what the run left on the forge, `("stop",)` ends.
    """
    with GitHubSandbox() as forge, ReplaySandbox({"replies": []}) as model:
        seed_github(forge.state, [REPO], USER, BOT, BOT_TOKEN)
        conn.send({"forge_url": forge.url, "model_url": model.openai_base_url})
        while (message := conn.recv())[0] != "stop":
            if message[0] == "task":
                model.model.load(message[1])
                forge.state.clear_requests()
                [key] = open_labelled_issues(forge.state, "github", [REPO], 1, USER, title="Read the notes")
                conn.send(key.number)
            else:
                conn.send(_report(forge, message[1]))


def _report(forge: GitHubSandbox, number: int) -> dict[str, Any]:
    comments = forge.state.comments(REPO, number)
    requests = forge.state.requests()
    return {
        "issue_comments": len(comments),
        "last_comment": comments[-1].body[:300] if comments else "",
        "labels": list(forge.state.issue(REPO, number).labels),
        "forge_requests": len(requests),
        "forge_requests_by_endpoint": dict(
            Counter(f"{record.method} {re.sub(r'/[0-9]+', '/N', record.path)}" for record in requests)
        ),
    }


class Servers(ServerProcess):
    """The forge and the model (`serve_forge_and_model`), in a child process or in threads."""

    def __init__(self, in_process: bool) -> None:
        super().__init__(serve_forge_and_model, in_process)

    def open_task(self, script: dict[str, Any]) -> int:
        number: int = self.ask("task", script)
        return number

    def report(self, number: int) -> dict[str, Any]:
        outcome: dict[str, Any] = self.ask("report", number)
        return outcome


# --- one variant ---------------------------------------------------------------------------


@dataclass(frozen=True)
class Variant:
    function_calling: bool
    step_comments: str  # "none" | "default" | "posted"

    def extra_config(self) -> dict[str, Any]:
        return {"progress_comment": {"enabled": False}} if self.step_comments == "posted" else {}


def run_variant(
    clock: StepClock, steps: int, variant: Variant, servers: Servers, model_latency: float = 0.0
) -> dict[str, Any]:
    """One task of `steps` tool steps; the step figures of that run."""
    comment = "" if variant.step_comments == "none" else STEP_COMMENT
    number = servers.open_task(_script(steps, comment, model_latency))
    with tempfile.TemporaryDirectory(prefix="bench-loop-") as tmp:
        config = _config(servers.urls, Path(tmp), variant.function_calling, variant.extra_config())
        configure_logging(config.logging, Redactor(config.secrets()), console=False)
        clock.steps.clear()
        try:
            report = asyncio.run(_run_cycle(config, clock))
        finally:
            logging.getLogger().handlers.clear()
        forge = servers.report(number)
        measured = [step for step in clock.steps if step.wall]
        statuses = [result.status for result in report.results]
        if statuses != ["done"] or len(measured) != steps + 1:
            log_tail = "".join((Path(tmp) / "logs" / LOG_FILE_NAME).read_text().splitlines(keepends=True)[-30:])
            raise SystemExit(
                f"benchmark run went wrong: statuses={statuses}, steps={len(measured)}, forge={forge}\n{log_tail}"
            )
    part_names = sorted({name for step in measured for name in step.parts})
    return {
        "protocol": _protocol(variant),
        "step_comments": variant.step_comments,
        "steps": len(measured),
        "issue_comments_at_end": forge["issue_comments"],
        "forge_requests_in_run": forge["forge_requests"],
        "forge_requests_by_endpoint": forge["forge_requests_by_endpoint"],
        "forge_requests_per_step_median": statistics.median(len(step.forge) for step in measured),
        "host_overhead": summary_ms([step.overhead for step in measured]),
        "host_cpu": summary_ms([step.host_cpu for step in measured]),
        "host_cpu_median_ms_by_quarter_of_the_run": [
            _median_ms(step.host_cpu for step in quarter) for quarter in _quarters(measured)
        ],
        "tool_cpu": summary_ms([step.tool_cpu for step in measured]),
        "host_overhead_median_ms_by_quarter_of_the_run": [
            _median_ms(step.overhead for step in quarter) for quarter in _quarters(measured)
        ],
        "step_wall": summary_ms([step.wall for step in measured]),
        "subtracted": {
            "llm_http": summary_ms([_length(step.llm) for step in measured]),
            "forge_http": summary_ms([_length(step.forge) for step in measured]),
            "tool": summary_ms([_length(step.tool) for step in measured]),
        },
        "llm_http_of_which_openai_sdk_outside_the_wire_median_ms": (
            _median_ms(_length(step.llm) - step.llm_wire_seconds for step in measured) if clock.wire_timed else None
        ),
        "overhead_parts_median_ms": {
            "llm_client_request_building": _median_ms(step.llm_client_seconds - _length(step.llm) for step in measured),
            "steering_checkpoints_without_their_forge_requests": _median_ms(step.steering_host for step in measured),
            **{name: _median_ms(step.parts.get(name, 0.0) for step in measured) for name in part_names},
        },
    }


def _protocol(variant: Variant) -> str:
    return "tool_calls" if variant.function_calling else "json_text"


def _median_ms(values: Iterable[float]) -> float:
    return round(statistics.median(values) * 1000, 3)


def _quarters(steps: list[Step]) -> list[list[Step]]:
    """The run's steps in four consecutive groups: shows whether overhead grows with history."""
    size = max(1, len(steps) // 4)
    return [steps[i * size : (i + 1) * size if i < 3 else len(steps)] for i in range(4)]


async def _run_cycle(config: AgentConfig, clock: StepClock) -> Any:
    service = AgentService(config, llm_factory=lambda: _timed_client(config, clock))
    try:
        return await service.run_cycle()
    finally:
        await service.aclose()


def _variants() -> list[Variant]:
    has_progress_comment = "progress_comment" in AgentConfig.model_fields
    kinds = ["none", "default", *(["posted"] if has_progress_comment else [])]
    return [Variant(function_calling, kind) for function_calling in (True, False) for kind in kinds]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=40, help="tool steps per task (default 40)")
    parser.add_argument(
        "--servers-in-process",
        action="store_true",
        help="run the forge and the model in threads of this process (their GIL use then counts as overhead)",
    )
    parser.add_argument(
        "--only",
        action="append",
        metavar="PROTOCOL:COMMENTS",
        help="run only this variant, e.g. tool_calls:posted (repeatable; for a profiler or valgrind)",
    )
    parser.add_argument(
        "--model-latency",
        type=float,
        default=0.0,
        metavar="SECONDS",
        help="the replay model answers after this long (subtracted as model time; default 0): steps as far "
        "apart as a real model's, so that a new-comment check looks back over as many comments as in real use",
    )
    arguments = parser.parse_args()
    chosen = [
        variant
        for variant in _variants()
        if not arguments.only or f"{_protocol(variant)}:{variant.step_comments}" in arguments.only
    ]
    clock = StepClock()
    instrument(clock)
    with Servers(arguments.servers_in_process) as servers:
        variants = [
            run_variant(clock, arguments.steps, variant, servers, arguments.model_latency) for variant in chosen
        ]
    worst = max(variant["host_overhead"]["median_ms"] for variant in variants)
    worst_cpu = max(variant["host_cpu"]["median_ms"] for variant in variants)
    emit(
        {
            "benchmark": "loop_overhead",
            "what": "host time per loop step minus model HTTP, forge HTTP and tool time",
            "model_latency_seconds": arguments.model_latency,
            "target": f"host overhead median < {TARGET_MEDIAN_MS} ms in every variant",
            "worst_median_ms": worst,
            "met": worst < TARGET_MEDIAN_MS,
            "worst_host_cpu_median_ms": worst_cpu,
            "servers": "threads of this process" if arguments.servers_in_process else "a child process",
            "overhead_parts_note": (
                "medians of each part alone, so they need not add up; run_state_checkpoint_file and "
                "operator_request_store_read (in a worker thread) run inside the steering checkpoints; the OpenAI "
                "SDK's own request work is inside llm_http (subtracted), shown apart"
            ),
            "breakdown_parts_absent_in_this_code": clock.parts_absent,
            "variants": variants,
        }
    )


if __name__ == "__main__":
    main()

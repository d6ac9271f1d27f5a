"""Host overhead per planning step, and prefix reuse between a planned run's requests.

Same method as `bench_loop_overhead.py` (whose timing wrappers, servers and config this
script reuses): a real task through `AgentService.run_cycle`, sandbox GitHub and the
zero-latency replay model in a child process, the built-in workspace MCP server; per step
(between two `ITERATION_START` checkpoints) the wall time minus the model's HTTP time,
every forge request and the tool's time. The task runs in planning mode (SPEC 10):
a plan of `--actions` actions, each two `workspace/view` steps (a varying range) and
`action_done`, a reflection every three ended actions, verification and completion.

Prefix reuse: the share of requests (after the first) whose messages start with the whole
previous request's messages and whose tool list is the same: what a provider's prefix
cache needs. Target 1.0 in both protocols. Memories are off: their request after the run
is another conversation, not a step of this one. The snapshot taken for this check is timed and
subtracted like the model's time (it is the benchmark's, not the host's).

Besides, the planning policy's own work per step (before_request, parse, accept and
the state dump a checkpoint makes) is timed alone, in process, over a 20-action plan with
a stand-in history: what planning mode adds to the plain loop's per-step overhead, a
figure that a loaded machine distorts much less than the end-to-end one.

Run: `python benchmarks/bench_planning_overhead.py [--actions 10]`
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import tempfile
import time
from pathlib import Path
from typing import Any

from _common import emit, summary_ms
from bench_loop_overhead import STEP_COMMENT, TARGET_MEDIAN_MS, Servers, StepClock, _config, _timed_client, instrument

from coding_agent.agent.planning import PlanningPolicy
from coding_agent.config import AgentConfig, PlanningConfig
from coding_agent.llm.protocols import create_protocol
from coding_agent.llm.types import ToolCallRequest
from coding_agent.llm.base import LLMClient
from coding_agent.llm.types import LLMReply, Message, ToolSpec
from coding_agent.logging_setup import configure_logging
from coding_agent.redaction import Redactor
from coding_agent.runtime.service import AgentService


def _script(actions: int) -> dict[str, Any]:
    ids = [f"a{n}" for n in range(1, actions + 1)]
    plan = {
        "goal_understanding": {"main_objective": "Read the notes", "success_criteria": ["every part was read"]},
        "action_plan": {"actions": [{"id": ident, "description": f"Read part {ident}"} for ident in ids]},
    }
    phases: dict[str, Any] = {
        "planning": [
            {"tool": "workspace/create", "args": {"path": "notes.txt", "content": "line\n" * 40}, "comment": STEP_COMMENT},
            {"plan": plan, "comment": STEP_COMMENT},
        ],
        "reflection": [{"reflection": {"status": "success", "evaluation": "fine", "plan_revision_needed": False}}] * actions,
        "verification": [{"verification": {"verification_passed": True}}],
        "completion": [{"done": "Read the notes."}],
    }
    for number, ident in enumerate(ids):
        phases[f"execution {ident}"] = [
            {"tool": "workspace/view", "args": {"path": "notes.txt", "view_range": [1, 2 + number]}, "comment": STEP_COMMENT},
            {"tool": "workspace/view", "args": {"path": "notes.txt", "view_range": [2, 3 + number]}, "comment": STEP_COMMENT},
            {"action_done": {"id": ident, "status": "done", "summary": "read"}},
        ]
    return {"phases": phases}


def _expected_requests(actions: int) -> int:
    reflections = (actions - 1) // 3  # after every third ended action while some remain
    return 2 + 3 * actions + reflections + 1 + 1


class PrefixRecorder:
    """Each request's messages and tools, to check that each extends the one before."""

    def __init__(self, clock: StepClock) -> None:
        self._clock = clock
        self.requests: list[tuple[list[str], str]] = []

    def wrap(self, client: LLMClient) -> LLMClient:
        inner = client._complete

        async def complete(messages: list[Message], tools: list[ToolSpec]) -> LLMReply:
            started = time.perf_counter()
            encoded = [json.dumps(message, sort_keys=True, default=str) for message in messages]
            self.requests.append((encoded, json.dumps([tool.name for tool in tools])))
            if self._clock.current is not None:  # the benchmark's own work: subtracted
                self._clock.current.tool.append((started, time.perf_counter()))
            return await inner(messages, tools)

        client._complete = complete  # type: ignore[method-assign]
        return client

    def reuse(self) -> float:
        pairs = list(zip(self.requests, self.requests[1:]))
        kept = sum(later[0][: len(earlier[0])] == earlier[0] and later[1] == earlier[1] for earlier, later in pairs)
        return round(kept / len(pairs), 4) if pairs else 1.0


def run_protocol(clock: StepClock, servers: Servers, actions: int, function_calling: bool) -> dict[str, Any]:
    servers.open_task(_script(actions))
    recorder = PrefixRecorder(clock)
    with tempfile.TemporaryDirectory(prefix="bench-planning-") as tmp:
        config = _config(servers.urls, Path(tmp), function_calling, {"planning": {"enabled": True}, "memory": {"enabled": False}})
        configure_logging(config.logging, Redactor(config.secrets()), console=False)
        clock.steps.clear()
        try:
            report = asyncio.run(_run(config, clock, recorder))
        finally:
            logging.getLogger().handlers.clear()
    measured = [step for step in clock.steps if step.wall]
    statuses = [result.status for result in report.results]
    expected = _expected_requests(actions)
    if statuses != ["done"] or len(recorder.requests) != expected:
        raise SystemExit(f"benchmark run went wrong: statuses={statuses}, requests={len(recorder.requests)} (expected {expected})")
    return {
        "protocol": "tool_calls" if function_calling else "json_text",
        "requests": len(recorder.requests),
        "steps_measured": len(measured),
        "host_overhead": summary_ms([step.overhead for step in measured]),
        "prefix_reuse": recorder.reuse(),
    }


async def _run(config: AgentConfig, clock: StepClock, recorder: PrefixRecorder) -> Any:
    service = AgentService(config, llm_factory=lambda: recorder.wrap(_timed_client(config, clock)))
    try:
        return await service.run_cycle()
    finally:
        await service.aclose()


class _History:
    """A stand-in model client: the history only (the policy never sends a request)."""

    def __init__(self) -> None:
        self.messages: list[Message] = [{"role": "system", "content": "rules"}, {"role": "user", "content": "the task"}]

    def send_user_message(self, text: str) -> None:
        self.messages.append({"role": "user", "content": text})

    def send_tool_result(self, call_id: str, name: str, text: str) -> None:
        self.messages.append({"role": "tool", "tool_call_id": call_id, "name": name, "content": text})


async def _nothing(_: str) -> None:
    return None


def _reply(native: bool, tool: str, phase_tag: dict[str, Any], arguments: dict[str, Any], number: int) -> LLMReply:
    if native:
        return LLMReply(content="", tool_calls=(ToolCallRequest(id=f"c{number}", name=tool, arguments=arguments),))
    return LLMReply(content=json.dumps({**phase_tag, **arguments} if "phase" in phase_tag else phase_tag))


async def policy_per_step(native: bool, actions: int = 20) -> dict[str, Any]:
    settings = PlanningConfig(enabled=True, reflection={"enabled": False}, verification={"enabled": False})
    policy = PlanningPolicy(settings, create_protocol(native), Path(tempfile.gettempdir()), None, _nothing, lambda: 0)
    history = _History()
    plan = {
        "goal_understanding": {"main_objective": "read", "success_criteria": ["read"]},
        "action_plan": {"actions": [{"id": f"a{n}", "description": "read"} for n in range(actions)]},
    }
    replies = [_reply(native, "submit_plan", {"phase": "planning"}, plan, 0)]
    for n in range(actions):
        view = {"path": "notes.txt", "view_range": [1, n + 2]}
        done = {"id": f"a{n}", "status": "done", "summary": "read"}
        replies.append(_reply(native, "workspace__view", {"comment": "c", "command": {"tool": "workspace/view", "args": view}}, view, 2 * n + 1))
        replies.append(_reply(native, "action_done", {"action_done": done}, done, 2 * n + 2))
    times = []
    for reply in replies:
        started = time.perf_counter()
        await policy.before_request(history)  # type: ignore[arg-type]
        history.messages.append({"role": "assistant", "content": reply.content})
        decision = policy.parse(reply)
        if decision.error is not None:
            raise SystemExit(f"policy benchmark went wrong: {decision.error}")
        await policy.accept(history, decision)  # type: ignore[arg-type]
        policy.get_state()
        times.append(time.perf_counter() - started)
        if decision.actions:
            history.send_user_message("the tool's output")
    return {"protocol": "tool_calls" if native else "json_text", **summary_ms(times)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--actions", type=int, default=10, help="actions in the plan (default 10)")
    parser.add_argument("--servers-in-process", action="store_true", help="forge and model in threads of this process")
    arguments = parser.parse_args()
    clock = StepClock()
    instrument(clock)
    with Servers(arguments.servers_in_process) as servers:
        variants = [run_protocol(clock, servers, arguments.actions, fc) for fc in (True, False)]
    policy = [asyncio.run(policy_per_step(native)) for native in (True, False)]
    worst = max(variant["host_overhead"]["median_ms"] for variant in variants)
    reuse = min(variant["prefix_reuse"] for variant in variants)
    emit(
        {
            "benchmark": "planning_overhead",
            "what": "host time per planning-mode step minus model HTTP, forge HTTP and tool time; prefix reuse between requests",
            "target": f"host overhead median < {TARGET_MEDIAN_MS} ms and prefix reuse 1.0 in both protocols",
            "worst_median_ms": worst,
            "min_prefix_reuse": reuse,
            "met": worst < TARGET_MEDIAN_MS and reuse == 1.0,
            "variants": variants,
            "planning_policy_alone_per_step": policy,
        }
    )


if __name__ == "__main__":
    main()

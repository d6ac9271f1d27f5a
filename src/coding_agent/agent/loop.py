"""The agent loop of seed 003 section 5: ask the model, post its comment, run its tool,
send the output back, until it says done or a limit is reached.

This is the one place the loop lives. It knows nothing of forges, labels or files beyond
three narrow collaborators: the reporter (posts comments), the tool hub (runs tools)
and the context files (records history). Steering (SPEC 8) is consulted at the named
checkpoints through `Steering.checkpoint`, which returns a `Decision`: the loop appends
its messages, and a pause or a stop ends the loop there (`_consult`, the one place).
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from enum import Enum
from typing import Literal, Protocol

from coding_agent.agent.loop_guard import LoopGuard
from coding_agent.agent.loop_policy import LoopPolicy, ProtocolPolicy
from coding_agent.context.storage import RunContextFiles
from coding_agent.llm.base import LLMClient
from coding_agent.llm.protocols import ReplyProtocol, ToolAction
from coding_agent.llm.types import LLMReply
from coding_agent.prompts.notices import Language, notice
from coding_agent.tools.types import ToolResult

__all__ = [
    "Checkpoint",
    "Verdict",
    "Decision",
    "Steering",
    "NoSteering",
    "ContextCompressor",
    "Reporter",
    "ToolRunner",
    "LoopLimits",
    "LoopOutcome",
    "run_loop",
]

log = logging.getLogger(__name__)


class Checkpoint(str, Enum):
    """Where steering is consulted (SPEC 8)."""

    ITERATION_START = "iteration_start"
    AFTER_REPLY = "after_reply"
    AFTER_TOOL = "after_tool"


class Verdict(str, Enum):
    """What steering says at a checkpoint: go on, or end the run here (SPEC 8)."""

    CONTINUE = "continue"
    PAUSE = "pause"
    STOP = "stop"


@dataclass(frozen=True)
class Decision:
    """Steering's answer at a checkpoint.

    `messages`: user messages for the model (new comments), appended by the loop in order.
    `ending`: for PAUSE and STOP, the exception the loop ends with; the runner catches it
    and publishes the matching ending (the loop does not need to know its type).
    """

    verdict: Verdict = Verdict.CONTINUE
    messages: tuple[str, ...] = ()
    ending: Exception | None = None

    def __post_init__(self) -> None:
        if (self.verdict is Verdict.CONTINUE) != (self.ending is None):
            raise ValueError("a pause or a stop needs its ending, and only they have one")


CONTINUE = Decision()


class Steering(Protocol):
    async def checkpoint(self, point: Checkpoint, llm: LLMClient) -> Decision:
        """Decide whether the run goes on, and what the model should be told first."""
        ...


class NoSteering:
    """Steering that never intervenes."""

    async def checkpoint(self, point: Checkpoint, llm: LLMClient) -> Decision:
        return CONTINUE


async def _consult(steering: Steering, point: Checkpoint, llm: LLMClient) -> bool:
    """Obey steering at `point`: append its messages, end the loop on a pause or a stop.
    True when messages were appended."""
    decision = await steering.checkpoint(point, llm)
    for text in decision.messages:
        llm.send_user_message(text)
    if decision.ending is not None:
        raise decision.ending
    return bool(decision.messages)


class ContextCompressor(Protocol):
    async def maybe_compress(self, llm: LLMClient, files: RunContextFiles) -> bool:
        """Summarise older messages when the prompt is over its threshold (SPEC 9.3)."""
        ...


class Reporter(Protocol):
    async def step_comment(self, text: str) -> None:
        """Publish the comment of one step."""
        ...


class ToolRunner(Protocol):
    async def call(self, name: str, args: dict) -> ToolResult:  # type: ignore[type-arg]
        ...


@dataclass(frozen=True)
class LoopLimits:
    max_steps: int
    max_tokens: int | None = None
    max_seconds: float | None = None
    max_invalid_replies: int = 5
    repeated_failure_threshold: int = 3


@dataclass(frozen=True)
class LoopOutcome:
    """How the loop ended. `comment` is the final comment (done) or the failure notice."""

    status: Literal["done", "failed"]
    comment: str
    steps: int


def _call_signature(action: ToolAction) -> str:
    return action.tool + json.dumps(action.args, sort_keys=True, default=str)


async def run_loop(
    llm: LLMClient,
    protocol: ReplyProtocol,
    tools: ToolRunner,
    files: RunContextFiles,
    reporter: Reporter,
    limits: LoopLimits,
    language: Language = "en",
    steering: Steering | None = None,
    on_step: Callable[[int], None] = lambda steps: None,
    clock: Callable[[], float] = time.monotonic,
    compressor: ContextCompressor | None = None,
    start_steps: int = 0,
    pending_reply: LLMReply | None = None,
    guard: LoopGuard | None = None,
    policy: LoopPolicy | None = None,
) -> LoopOutcome:
    """Drive the conversation whose system prompt and task prompt are already in `llm`.

    A continued run (resumed, or taken over) passes the steps it had done as
    `start_steps`, and, when it stopped between a reply and its action, that reply as
    `pending_reply`: it is acted on without asking the model again. `policy` reads the
    replies (default: `protocol` as it is; planning mode adds its phases there), `guard`
    watches for a model repeating itself (SPEC 4's loop guard).
    """
    steering = steering or NoSteering()
    policy = policy or ProtocolPolicy(protocol)
    guard = guard or LoopGuard(enabled=False)
    started = clock()
    steps = start_steps
    invalid_in_a_row = 0
    failures: dict[str, int] = {}
    last_failure = ""

    def failed(name: str, **values: object) -> LoopOutcome:
        return stuck(notice(name, language, **values))

    def stuck(text: str) -> LoopOutcome:
        where = policy.describe()
        return LoopOutcome("failed", f"{text}\n\n{where}" if where else text, steps)

    while True:
        if pending_reply is not None:
            reply, pending_reply = pending_reply, None
        else:
            await _consult(steering, Checkpoint.ITERATION_START, llm)
            if steps >= limits.max_steps:
                return failed("limit_steps", limit=limits.max_steps)
            if limits.max_tokens is not None and llm.usage.total_tokens >= limits.max_tokens:
                return failed("limit_tokens", limit=limits.max_tokens)
            if limits.max_seconds is not None and clock() - started >= limits.max_seconds:
                return failed("limit_seconds", limit=limits.max_seconds)

            await policy.before_request(llm)
            if compressor is not None:
                await compressor.maybe_compress(llm, files)
            reply = await llm.get_response()
            steps += 1
            on_step(steps)
            files.sync_messages(llm.messages)
        decision = policy.parse(reply)
        # Tool steps are watched with their results below; this is for replies that run nothing.
        repeated = guard.reply_text(reply.content) if not (reply.tool_calls or decision.actions) else None
        if repeated is not None and repeated.action == "fail":
            return stuck(repeated.message)
        if decision.error is not None:
            invalid_in_a_row += 1
            log.warning("step %d: unusable reply (%d in a row): %s", steps, invalid_in_a_row, decision.error)
            if invalid_in_a_row >= limits.max_invalid_replies:
                return failed("invalid_replies", count=invalid_in_a_row)
            error = decision.error if repeated is None else f"{decision.error}. {repeated.message}"
            policy.send_correction(llm, reply, error)
            continue
        invalid_in_a_row = 0

        told = await _consult(steering, Checkpoint.AFTER_REPLY, llm)
        if decision.done and not decision.actions and told:
            continue  # comments arrived as the model finished: it answers them first (SPEC 8.1)
        decision = await policy.accept(llm, decision)
        if repeated is not None and not decision.done:
            llm.send_user_message(repeated.message)
        if decision.comment and not decision.done:
            await reporter.step_comment(decision.comment)

        for action in decision.actions:
            result = await tools.call(action.tool, action.args)
            files.record_tool_call(
                action.tool, action.args, result.is_error, result.output_chars, result.cut_chars, result.duration_seconds,
                result=result.text,
            )
            log.info("step %d: %s -> %s (%.3fs)", steps, action.tool, "error" if result.is_error else "ok", result.duration_seconds)
            output = result.text
            signature = _call_signature(action)
            if result.is_error:
                failures[signature] = failures.get(signature, 0) + 1 if signature == last_failure else 1
                last_failure = signature
                if failures[signature] >= limits.repeated_failure_threshold:
                    output += "\n\n" + notice("repeated_failure", language, tool=action.tool, count=failures[signature])
            else:
                last_failure = ""
            verdict = guard.tool_call(action.tool, action.args, result.text, result.is_error)
            if verdict is not None and verdict.action == "fail":
                files.sync_messages(llm.messages)
                return stuck(verdict.message)
            if verdict is not None:
                output += "\n\n" + verdict.message
            protocol.send_tool_result(llm, action, output, result.is_error)
        if decision.actions:
            await _consult(steering, Checkpoint.AFTER_TOOL, llm)
            files.sync_messages(llm.messages)

        if decision.done:
            return LoopOutcome("done", decision.comment, steps)

"""The agent loop of seed 003 section 5: ask the model, post its comment, run its tool,
send the output back, until it says done or a limit is reached.

This is the one place the loop lives. It knows nothing of forges, labels or files beyond
three narrow collaborators: the reporter (posts comments), the tool runner (runs tools)
and the context files (record history). Steering (SPEC 8) is consulted at the named
checkpoints through `Steering.checkpoint`, which returns a `Decision`: the loop appends
its messages, and a pause or a stop ends the loop there (`_Loop.consult`, the one place).
Repetition is watched by one detector, the loop guard (`agent.loop_guard`).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from enum import Enum
from typing import Any, Literal, Protocol, TypeVar

from coding_agent.agent.loop_guard import LoopGuard
from coding_agent.agent.loop_policy import LoopPolicy
from coding_agent.context.storage import RunContextFiles
from coding_agent.errors import ToolsRefused
from coding_agent.llm.base import LLMClient
from coding_agent.llm.protocols import ParsedReply, ToolAction
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
    "Oversight",
    "LoopStart",
    "LoopOutcome",
    "run_loop",
]

log = logging.getLogger(__name__)

T = TypeVar("T")

# What the model reads for a tool call a shutdown cut (SPEC 8.3), when the run resumes.
TOOL_INTERRUPTED = (
    "tool {tool} was interrupted after {seconds:.0f}s: the agent shut down while it ran. It may "
    "have done part of its work; check the workspace before running it again."
)


class Checkpoint(str, Enum):
    """Where steering is consulted (SPEC 8).

    SPEC 8's checkpoint after a reply and before its action comes in two kinds, so that
    steering knows whether `AFTER_TOOL` follows before the next request: `BEFORE_TOOLS`
    after a reply whose tools run next, `AFTER_REPLY` after one that runs none."""

    ITERATION_START = "iteration_start"
    AFTER_REPLY = "after_reply"
    BEFORE_TOOLS = "before_tools"
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


class ContextCompressor(Protocol):
    async def maybe_compress(self, llm: LLMClient, files: RunContextFiles) -> bool:
        """Summarise older messages when the prompt is over its threshold (SPEC 9.3)."""
        ...


class Reporter(Protocol):
    async def step_comment(self, text: str) -> None:
        """Publish the comment of one step."""
        ...


class ToolRunner(Protocol):
    async def call(self, name: str, args: dict[str, Any]) -> ToolResult:
        ...


@dataclass(frozen=True)
class LoopLimits:
    """When the loop gives up (SPEC 4), and the language of the comment saying which limit."""

    max_steps: int
    max_tokens: int | None = None
    max_seconds: float | None = None
    max_invalid_replies: int = 5
    language: Language = "en"


def _no_step_hook(steps: int) -> None:
    return None


ToolsRefusedHook = Callable[[LLMClient, ToolsRefused], bool]


async def _never_cut() -> Exception:
    await asyncio.Event().wait()
    raise AssertionError("unreachable")


@dataclass(frozen=True)
class Oversight:
    """What watches the loop from outside its conversation: steering at the checkpoints,
    the loop guard, the context compressor before each request, a hook told each new step
    count, the clock `max_seconds` is measured on, what to do when the server refuses
    the native tools offered (`llm.function_calling: auto`: the hook switches the run to
    JSON in text and returns True, and the request is made again; none: the run fails),
    and `cut`: returns, once a model request or tool call in flight must be given up (a
    shutdown's grace is over, SPEC 8.3), the ending the loop then ends with."""

    steering: Steering = field(default_factory=NoSteering)
    guard: LoopGuard = field(default_factory=lambda: LoopGuard(enabled=False))
    compressor: ContextCompressor | None = None
    on_step: Callable[[int], None] = _no_step_hook
    clock: Callable[[], float] = time.monotonic
    on_tools_refused: ToolsRefusedHook | None = None
    cut: Callable[[], Awaitable[Exception]] = _never_cut


@dataclass(frozen=True)
class LoopStart:
    """Where the loop starts: a continued run (resumed, or taken over) passes the steps it
    had done, and, when it stopped between a reply and its action, that reply, which is
    acted on without asking the model again."""

    steps: int = 0
    pending_reply: LLMReply | None = None


@dataclass(frozen=True)
class LoopOutcome:
    """How the loop ended. `comment` is the final comment (done) or the failure notice."""

    status: Literal["done", "failed"]
    comment: str
    steps: int


class _Ended(Exception):
    """Raised inside a step to end the loop with `outcome`."""

    def __init__(self, outcome: LoopOutcome) -> None:
        super().__init__(outcome.status)
        self.outcome = outcome


class _Cut(Exception):
    """A model request or tool call was given up (`Oversight.cut`); the loop ends with `ending`."""

    def __init__(self, ending: Exception) -> None:
        super().__init__(str(ending))
        self.ending = ending


def _retrieved(task: asyncio.Task[None]) -> None:
    """Mark a task's outcome as seen (a task whose error nobody reads is logged at exit)."""
    if not task.cancelled():
        task.exception()


class _Loop:
    """One run of the loop: its collaborators and its counters."""

    def __init__(
        self,
        llm: LLMClient,
        policy: LoopPolicy,
        tools: ToolRunner,
        files: RunContextFiles,
        reporter: Reporter,
        limits: LoopLimits,
        oversight: Oversight,
        start: LoopStart,
    ) -> None:
        self.llm, self.policy, self.tools, self.files, self.reporter = llm, policy, tools, files, reporter
        self.limits, self.oversight, self.guard = limits, oversight, oversight.guard
        self.steps = start.steps
        self.pending_reply = start.pending_reply
        self.started = oversight.clock()
        self.invalid_in_a_row = 0

    def failed(self, name: str, **values: object) -> _Ended:
        return self.stuck(notice(name, self.limits.language, **values))

    def stuck(self, text: str) -> _Ended:
        where = self.policy.describe()
        return _Ended(LoopOutcome("failed", f"{text}\n\n{where}" if where else text, self.steps))

    async def consult(self, point: Checkpoint) -> bool:
        """Obey steering at `point`: append its messages, end the loop on a pause or a stop.
        True when messages were appended."""
        decision = await self.oversight.steering.checkpoint(point, self.llm)
        for text in decision.messages:
            self.llm.send_user_message(text)
        if decision.ending is not None:
            raise decision.ending
        return bool(decision.messages)

    async def next_reply(self) -> LLMReply:
        """The reply to act on: the pending one of a continued run, else the model's next."""
        if self.pending_reply is not None:
            reply, self.pending_reply = self.pending_reply, None
            return reply
        await self.consult(Checkpoint.ITERATION_START)
        self.check_limits()
        while True:
            await self.policy.before_request(self.llm)
            if self.oversight.compressor is not None:
                await self.oversight.compressor.maybe_compress(self.llm, self.files)
            try:
                # Cut: the history is as it was before the request, and the next worker sends it again.
                reply = await self.unless_cut(self.llm.get_response())
            except ToolsRefused as refusal:  # not a step: the same request goes again, in JSON text
                hook = self.oversight.on_tools_refused
                if hook is None or not hook(self.llm, refusal):
                    raise
                continue
            break
        self.steps += 1
        self.oversight.on_step(self.steps)
        self.files.sync_messages(self.llm.messages)
        return reply

    async def unless_cut(self, work: Awaitable[T]) -> T:
        """`work`, unless the run is cut first: then `work` is cancelled (and awaited, so
        nothing of it goes on) and `_Cut` raised."""
        doing = asyncio.ensure_future(work)
        cutting = asyncio.ensure_future(self.oversight.cut())
        try:
            await asyncio.wait({doing, cutting}, return_when=asyncio.FIRST_COMPLETED)
        except BaseException:  # the run itself cancelled
            doing.cancel()
            cutting.cancel()
            raise
        if doing.done():
            cutting.cancel()
            return doing.result()
        doing.cancel()
        await asyncio.wait({doing})
        if not doing.cancelled() and doing.exception() is None:
            return doing.result()  # it ended as it was cancelled: keep what it did
        raise _Cut(cutting.result())

    def check_limits(self) -> None:
        limits = self.limits
        if self.steps >= limits.max_steps:
            raise self.failed("limit_steps", limit=limits.max_steps)
        if limits.max_tokens is not None and self.llm.usage.total_tokens >= limits.max_tokens:
            raise self.failed("limit_tokens", limit=limits.max_tokens)
        if limits.max_seconds is not None and self.oversight.clock() - self.started >= limits.max_seconds:
            raise self.failed("limit_seconds", limit=limits.max_seconds)

    def repeated_text(self, reply: LLMReply, parsed: ParsedReply) -> str | None:
        """The loop guard's note on a reply that runs nothing (tool steps are watched with
        their results); ends the loop when the guard says the model is stuck."""
        if reply.tool_calls or parsed.actions:
            return None
        verdict = self.guard.reply_text(reply.content)
        if verdict is not None and verdict.action == "fail":
            raise self.stuck(verdict.message)
        return verdict.message if verdict is not None else None

    def correct(self, reply: LLMReply, error: str, repeated: str | None) -> None:
        """Answer an unusable reply; too many in a row end the run."""
        self.invalid_in_a_row += 1
        log.warning("step %d: unusable reply (%d in a row): %s", self.steps, self.invalid_in_a_row, error)
        if self.invalid_in_a_row >= self.limits.max_invalid_replies:
            raise self.failed("invalid_replies", count=self.invalid_in_a_row)
        self.policy.send_correction(self.llm, reply, error if repeated is None else f"{error}. {repeated}")

    async def act(self, parsed: ParsedReply, repeated: str | None) -> LoopOutcome | None:
        """A usable reply past its checkpoint: post its comment, run its tools; the
        outcome when it finishes the run."""
        self.invalid_in_a_row = 0
        told = await self.consult(Checkpoint.BEFORE_TOOLS if parsed.actions else Checkpoint.AFTER_REPLY)
        if parsed.done and not parsed.actions and told:
            return None  # comments arrived as the model finished: it answers them first (SPEC 8.1)
        parsed = await self.policy.accept(self.llm, parsed)
        if repeated is not None and not parsed.done:
            self.llm.send_user_message(repeated)
        if parsed.comment and not parsed.done:
            await self.run_tools_while_posting(parsed.comment, parsed.actions)
        else:
            for action in parsed.actions:
                await self.run_tool(action)
        if parsed.actions:
            await self.consult(Checkpoint.AFTER_TOOL)
        return LoopOutcome("done", parsed.comment, self.steps) if parsed.done else None

    async def run_tools_while_posting(self, comment: str, actions: Sequence[ToolAction]) -> None:
        """The step's tools while its comment goes out: neither needs the other, and a
        forge write (hundreds of milliseconds on a real forge) would otherwise hold the
        step up. Both are done before the step's next checkpoint, as if one ran after the
        other: a comment that cannot be written still ends the run, once the tools have
        run; a failed tool's error is the one that ends it, the comment finished first.
        A cancelled run (a shutdown) cancels the comment too, as it would a comment
        still being written."""
        posting = asyncio.create_task(self.reporter.step_comment(comment))
        try:
            for action in actions:
                await self.run_tool(action)
        except (asyncio.CancelledError, _Cut):  # a cut run does not wait for the forge either
            posting.cancel()
            posting.add_done_callback(_retrieved)  # a comment that failed just before: no warning
            raise
        except BaseException:
            await asyncio.wait([posting])
            _retrieved(posting)  # the tool's error is the one reported
            raise
        await posting

    async def run_tool(self, action: ToolAction) -> None:
        """Run one action and send its output back, with the loop guard's note if any. A
        call cut by a shutdown is answered as interrupted, and the loop ends there."""
        started = self.oversight.clock()
        try:
            result = await self.unless_cut(self.tools.call(action.tool, action.args))
        except _Cut:
            seconds = self.oversight.clock() - started
            text = TOOL_INTERRUPTED.format(tool=action.tool, seconds=seconds)
            self.files.record_tool_call(action.tool, action.args, True, 0, 0, seconds, result=text)
            log.info("step %d: %s -> interrupted by the shutdown (%.3fs)", self.steps, action.tool, seconds)
            self.policy.protocol.send_tool_result(self.llm, action, text, True)
            raise
        self.files.record_tool_call(
            action.tool, action.args, result.is_error, result.output_chars, result.cut_chars, result.duration_seconds,
            result=result.text,
        )
        status = "error" if result.is_error else "ok"
        log.info("step %d: %s -> %s (%.3fs)", self.steps, action.tool, status, result.duration_seconds)
        output = result.text
        verdict = self.guard.tool_call(action.tool, action.args, result.text, result.is_error)
        if verdict is not None and verdict.action == "fail":
            raise self.stuck(verdict.message)
        if verdict is not None:
            output += "\n\n" + verdict.message
        self.policy.protocol.send_tool_result(self.llm, action, output, result.is_error)


async def run_loop(
    llm: LLMClient,
    policy: LoopPolicy,
    tools: ToolRunner,
    files: RunContextFiles,
    reporter: Reporter,
    limits: LoopLimits,
    oversight: Oversight | None = None,
    start: LoopStart | None = None,
) -> LoopOutcome:
    """Drive the conversation whose system prompt and task prompt are already in `llm`.

    `policy` reads the replies (`ProtocolPolicy(protocol)` for the plain loop; planning
    mode adds its phases there); `start` is where a continued run stands.

    The history goes to `files` after each reply, before it is acted on, and as the loop
    ends; the tool results between are written by the crash checkpoint at the start of
    the next iteration (steering's), which writes the history first anyway: a second
    write of the same step would cost two file appends for nothing.
    """
    loop = _Loop(llm, policy, tools, files, reporter, limits, oversight or Oversight(), start or LoopStart())
    try:
        while True:
            reply = await loop.next_reply()
            parsed = policy.parse(reply)
            repeated = loop.repeated_text(reply, parsed)
            if parsed.error is not None:
                loop.correct(reply, parsed.error, repeated)
                continue
            outcome = await loop.act(parsed, repeated)
            if outcome is not None:
                break
    except _Ended as ended:
        outcome = ended.outcome
    except _Cut as cut:
        files.sync_messages(llm.messages)
        raise cut.ending from None
    files.sync_messages(llm.messages)
    return outcome

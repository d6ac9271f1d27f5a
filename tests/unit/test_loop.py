"""The loop of SPEC 4, driven directly: the replay model's real client over HTTP, an
in-memory tool runner and real context files. Seconds, not a CLI run, per loop change."""

from __future__ import annotations

import asyncio
import json
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from coding_agent.agent.loop import Checkpoint, Decision, LoopLimits, LoopOutcome, LoopStart, Oversight, run_loop
from coding_agent.agent.loop_guard import LoopGuard
from coding_agent.agent.loop_policy import ProtocolPolicy
from coding_agent.context.storage import ContextStorage, RunContextFiles
from coding_agent.errors import ForgeError
from coding_agent.llm.base import LLMClient
from coding_agent.llm.openai_client import OpenAICompatibleClient
from coding_agent.llm.protocols import create_protocol
from coding_agent.llm.types import LLMReply, ToolSpec
from coding_agent.redaction import Redactor
from coding_agent.retry import RetryPolicy
from coding_agent.sandbox.replay_model import ReplaySandbox, ScriptSource
from coding_agent.tools.types import ToolResult
from tests.support.waiting import wait_until

VIEW = ToolSpec("workspace/view", "Show a file", {"type": "object", "properties": {"path": {"type": "string"}}})


class MemoryTools:
    """A tool runner over a dict of files: `workspace/view` of a missing file is an error."""

    def __init__(self, files: dict[str, str]) -> None:
        self.files = files
        self.calls: list[tuple[str, dict[str, Any]]] = []

    async def call(self, name: str, args: dict[str, Any]) -> ToolResult:
        self.calls.append((name, args))
        text = self.files.get(str(args.get("path")))
        if name != "workspace/view" or text is None:
            return ToolResult(name, f"no such file: {args.get('path')}", is_error=True)
        return ToolResult(name, text, output_chars=len(text))


class Comments:
    def __init__(self) -> None:
        self.posted: list[str] = []

    async def step_comment(self, text: str) -> None:
        self.posted.append(text)


@pytest.fixture(scope="module")
def server() -> Iterator[ReplaySandbox]:
    with ReplaySandbox({}) as sandbox:
        yield sandbox


class Run:
    """One conversation with the replay model: its client, context files and collaborators."""

    def __init__(self, server: ReplaySandbox, script: ScriptSource, tmp_path: Path, function_calling: bool) -> None:
        server.model.load(script)
        self.server = server
        self.llm = OpenAICompatibleClient(
            model="replay", base_url=server.openai_base_url, api_key="k", retry=RetryPolicy(retries=0)
        )
        self.protocol = create_protocol(function_calling)
        self.files: RunContextFiles = ContextStorage(tmp_path, Redactor([])).start_run("run-1")
        self.tools = MemoryTools({"README.md": "# readme\n"})
        self.comments = Comments()
        self.llm.send_system_prompt("You are a coding agent.\n" + self.protocol.instructions())
        self.protocol.prepare(self.llm, [VIEW])
        self.llm.send_user_message(f"Task {tmp_path.name}: read the README.")

    async def loop(
        self, limits: LoopLimits | None = None, oversight: Oversight | None = None, start: LoopStart | None = None
    ) -> LoopOutcome:
        try:
            policy, limits = ProtocolPolicy(self.protocol), limits or LoopLimits(max_steps=10)
            return await run_loop(self.llm, policy, self.tools, self.files, self.comments, limits, oversight, start)
        finally:
            await self.llm.aclose()

    def lines(self, name: str) -> list[dict[str, Any]]:
        return [json.loads(line) for line in (self.files.directory / name).read_text().splitlines()]


@pytest.mark.parametrize("function_calling", [False, True], ids=["json_text", "tool_calls"])
async def test_a_tool_step_then_done(server: ReplaySandbox, tmp_path: Path, function_calling: bool) -> None:
    script = {
        "replies": [
            {"tool": "workspace/view", "args": {"path": "README.md"}, "comment": "Reading the README"},
            {"done": "The README is a heading."},
        ]
    }
    run = Run(server, script, tmp_path, function_calling)
    outcome = await run.loop()
    assert outcome == LoopOutcome("done", "The README is a heading.", 2)
    assert run.tools.calls == [("workspace/view", {"path": "README.md"})]
    assert run.comments.posted == ["Reading the README"], "the step's comment, not the final one"
    assert "# readme" in json.dumps(run.llm.messages), "the tool's output went back to the model"
    assert run.lines("messages.jsonl") == run.lines("current.jsonl") == run.llm.messages
    assert [line["tool"] for line in run.lines("tools.jsonl")] == ["workspace/view"]


async def test_a_repeated_failing_call_gets_one_note(server: ReplaySandbox, tmp_path: Path) -> None:
    """The same failing call a third time: the model is told once, by the loop guard,
    whether or not the guard's own count of identical results warns too."""
    missing = {"tool": "workspace/view", "args": {"path": "missing.md"}}
    run = Run(server, {"replies": [missing, missing, missing, {"done": "Gave up."}]}, tmp_path, True)
    guard = LoopGuard(enabled=True, warn_after=3, fail_after=5)
    outcome = await run.loop(oversight=Oversight(guard=guard))
    assert outcome.status == "done"
    results = [message["content"] for message in run.llm.messages if message["role"] == "tool"]
    assert len(results) == 3
    assert "\n\n" not in results[0] + results[1], "no note before the third failure"
    assert results[2].count("\n\n") == 1, "one note on the third result"
    assert "3 times in a row" in results[2]


async def test_a_repeated_failing_call_is_reported_with_the_guard_off(server: ReplaySandbox, tmp_path: Path) -> None:
    missing = {"tool": "workspace/view", "args": {"path": "missing.md"}}
    run = Run(server, {"replies": [missing, missing, missing, {"done": "Gave up."}]}, tmp_path, True)
    await run.loop()
    results = [message["content"] for message in run.llm.messages if message["role"] == "tool"]
    assert "has now failed 3 times in a row" in results[2]
    assert all("failed" not in result for result in results[:2])


async def test_the_step_limit_ends_the_run(server: ReplaySandbox, tmp_path: Path) -> None:
    views = [{"tool": "workspace/view", "args": {"path": f"f{n}.md"}} for n in range(5)]
    run = Run(server, {"replies": views}, tmp_path, True)
    outcome = await run.loop(LoopLimits(max_steps=2))
    assert outcome.status == "failed" and outcome.steps == 2
    assert "2" in outcome.comment
    assert len(run.tools.calls) == 2


async def test_a_continued_run_acts_on_its_pending_reply_first(server: ReplaySandbox, tmp_path: Path) -> None:
    """A run that stopped between a reply and its action resumes with that action, without
    asking the model again, and counts on from the steps it had done."""
    run = Run(server, {"replies": [{"done": "Read it."}]}, tmp_path, False)
    pending = LLMReply(content=json.dumps({"comment": "Again", "command": {"tool": "workspace/view", "args": {"path": "README.md"}}}))
    run.llm.messages.append({"role": "assistant", "content": pending.content})
    steps_seen: list[int] = []
    outcome = await run.loop(oversight=Oversight(on_step=steps_seen.append), start=LoopStart(steps=4, pending_reply=pending))
    assert run.tools.calls == [("workspace/view", {"path": "README.md"})]
    assert len(run.server.requests) == 1, "the pending reply was not asked for again"
    assert outcome == LoopOutcome("done", "Read it.", 5) and steps_seen == [5]


class RecordedCheckpoints:
    """Steering that lets everything through and keeps the checkpoints it was consulted at."""

    def __init__(self) -> None:
        self.points: list[Checkpoint] = []

    async def checkpoint(self, point: Checkpoint, llm: LLMClient) -> Decision:
        self.points.append(point)
        return Decision()


@pytest.mark.parametrize("function_calling", [False, True], ids=["json_text", "tool_calls"])
async def test_the_checkpoint_after_a_reply_says_whether_tools_run_next(
    server: ReplaySandbox, tmp_path: Path, function_calling: bool
) -> None:
    """Steering learns at the reply's checkpoint whether AFTER_TOOL follows before the next
    request (it then leaves new comments to that one), whatever the reply protocol."""
    script = {"replies": [{"tool": "workspace/view", "args": {"path": "README.md"}}, {"done": "Read it."}]}
    run = Run(server, script, tmp_path, function_calling)
    steering = RecordedCheckpoints()
    outcome = await run.loop(oversight=Oversight(steering=steering))
    assert outcome.status == "done"
    assert steering.points == [
        Checkpoint.ITERATION_START,
        Checkpoint.BEFORE_TOOLS,
        Checkpoint.AFTER_TOOL,
        Checkpoint.ITERATION_START,
        Checkpoint.AFTER_REPLY,
    ]


class CommentAfterToolStarts(Comments):
    """A step comment that is written only once the step's tool has started (a forge
    write that takes longer than the tool's start): a loop that waits for the comment
    before its tools never gets there."""

    def __init__(self, tool_started: asyncio.Event) -> None:
        super().__init__()
        self.tool_started = tool_started

    async def step_comment(self, text: str) -> None:
        await self.tool_started.wait()
        self.posted.append(text)


class ToolThatSignals(MemoryTools):
    def __init__(self, files: dict[str, str], started: asyncio.Event) -> None:
        super().__init__(files)
        self.started = started

    async def call(self, name: str, args: dict[str, Any]) -> ToolResult:
        self.started.set()
        await asyncio.sleep(0)  # the call's own I/O: the comment's write goes on meanwhile
        return await super().call(name, args)


class PostedAtCheckpoints:
    """Steering that lets everything through and notes the comments posted by each checkpoint."""

    def __init__(self, comments: Comments) -> None:
        self.comments = comments
        self.seen: list[tuple[Checkpoint, list[str]]] = []

    async def checkpoint(self, point: Checkpoint, llm: LLMClient) -> Decision:
        self.seen.append((point, list(self.comments.posted)))
        return Decision()


@pytest.mark.parametrize("function_calling", [False, True], ids=["json_text", "tool_calls"])
async def test_a_step_s_comment_goes_out_while_its_tools_run(
    server: ReplaySandbox, tmp_path: Path, function_calling: bool
) -> None:
    """Neither waits for the other, and both are done before the step's next checkpoint."""
    script = {
        "replies": [
            {"tool": "workspace/view", "args": {"path": "README.md"}, "comment": "Reading the README"},
            {"done": "The README is a heading."},
        ]
    }
    run = Run(server, script, tmp_path, function_calling)
    started = asyncio.Event()
    run.tools = ToolThatSignals(run.tools.files, started)
    run.comments = comments = CommentAfterToolStarts(started)
    steering = PostedAtCheckpoints(comments)
    outcome = await asyncio.wait_for(run.loop(oversight=Oversight(steering=steering)), 30)
    assert outcome == LoopOutcome("done", "The README is a heading.", 2)
    assert comments.posted == ["Reading the README"]
    assert (Checkpoint.AFTER_TOOL, ["Reading the README"]) in steering.seen, "out before the step's next checkpoint"


class FailingComments(Comments):
    async def step_comment(self, text: str) -> None:
        raise ForgeError("github POST /repos/o/r/issues/1/comments: 502")


async def test_a_step_comment_that_cannot_be_written_ends_the_run_once_its_tools_ran(
    server: ReplaySandbox, tmp_path: Path
) -> None:
    script = {"replies": [{"tool": "workspace/view", "args": {"path": "README.md"}, "comment": "Reading"}, {"done": "x"}]}
    run = Run(server, script, tmp_path, True)
    run.comments = FailingComments()
    with pytest.raises(ForgeError, match="502"):
        await run.loop()
    assert run.tools.calls == [("workspace/view", {"path": "README.md"})], "the step's tool ran"
    assert len(run.server.requests) == 1, "no further request to the model"


class BrokenTools(MemoryTools):
    async def call(self, name: str, args: dict[str, Any]) -> ToolResult:
        await asyncio.sleep(0)
        raise RuntimeError("the tool runner broke")


class SlowComments(Comments):
    async def step_comment(self, text: str) -> None:
        for _ in range(5):  # a write that outlasts the tool's failure
            await asyncio.sleep(0)
        self.posted.append(text)


async def test_a_tool_that_raises_ends_the_run_with_its_error_once_the_step_comment_is_out(
    server: ReplaySandbox, tmp_path: Path
) -> None:
    script = {"replies": [{"tool": "workspace/view", "args": {"path": "README.md"}, "comment": "Reading"}]}
    run = Run(server, script, tmp_path, True)
    run.tools, run.comments = BrokenTools(run.tools.files), SlowComments()
    with pytest.raises(RuntimeError, match="the tool runner broke"):
        await run.loop()
    assert run.comments.posted == ["Reading"], "the comment was written, as before the tools ran"


class HangingTools(MemoryTools):
    def __init__(self, files: dict[str, str]) -> None:
        super().__init__(files)
        self.started = asyncio.Event()

    async def call(self, name: str, args: dict[str, Any]) -> ToolResult:
        self.started.set()
        await asyncio.Event().wait()  # a tool still running when the run is cancelled
        raise AssertionError("never reached")


class HangingComments(Comments):
    def __init__(self) -> None:
        super().__init__()
        self.started, self.cancelled = asyncio.Event(), asyncio.Event()

    async def step_comment(self, text: str) -> None:
        self.started.set()
        try:
            await asyncio.Event().wait()  # a forge write still going
        except asyncio.CancelledError:
            self.cancelled.set()
            raise


async def test_a_cancelled_run_cancels_the_step_comment_being_written(server: ReplaySandbox, tmp_path: Path) -> None:
    """A shutdown does not wait for a forge write's retries: the comment goes with the step."""
    script = {"replies": [{"tool": "workspace/view", "args": {"path": "README.md"}, "comment": "Reading"}]}
    run = Run(server, script, tmp_path, True)
    run.tools, run.comments = tools, comments = HangingTools(run.tools.files), HangingComments()
    looping = asyncio.create_task(run.loop())
    await asyncio.wait_for(asyncio.gather(tools.started.wait(), comments.started.wait()), 30)
    looping.cancel()
    await asyncio.wait({looping}, timeout=30)
    assert looping.cancelled(), "the run ended at once, not after the comment's write"
    await asyncio.wait_for(comments.cancelled.wait(), 30)
    assert comments.posted == []


class Paused(Exception):
    """The ending a cut loop ends with (steering's `RunPaused` in a run)."""


def cut_when(event: asyncio.Event) -> Any:
    async def cut() -> Exception:
        await event.wait()
        return Paused("shutdown")

    return cut


async def test_a_cut_model_request_ends_the_loop_with_the_history_as_before_it(tmp_path: Path) -> None:
    """SPEC 8.3: the next worker sends the cut request again, so nothing of it is kept."""
    release = threading.Event()

    def slow(_: dict[str, Any]) -> None:
        release.wait(30)  # the model takes its time over this answer

    script = {"replies": [{"tool": "workspace/view", "args": {"path": "README.md"}}, {"done": "Read it.", "before": {"slow": {}}}]}
    with ReplaySandbox({}, actions={"slow": slow}) as own:
        run = Run(own, script, tmp_path, True)
        cut = asyncio.Event()
        looping = asyncio.create_task(run.loop(oversight=Oversight(cut=cut_when(cut))))
        try:
            await wait_until(lambda: len(own.requests) == 2, 30, "the second request to be in flight")
            before = [dict(message) for message in run.llm.messages]
            cut.set()
            with pytest.raises(Paused):
                await asyncio.wait_for(looping, 10)
        finally:
            release.set()
    assert run.llm.messages == before, "nothing of the cut request is in the history"
    assert run.lines("current.jsonl")[-1]["role"] == "tool", "the saved history ends before the cut request"


async def test_a_cut_tool_call_is_answered_as_interrupted_and_ends_the_loop(server: ReplaySandbox, tmp_path: Path) -> None:
    script = {"replies": [{"tool": "workspace/view", "args": {"path": "README.md"}, "comment": "Reading"}]}
    run = Run(server, script, tmp_path, True)
    run.tools, run.comments = tools, comments = HangingTools(run.tools.files), HangingComments()
    cut = asyncio.Event()
    looping = asyncio.create_task(run.loop(oversight=Oversight(cut=cut_when(cut))))
    await asyncio.wait_for(asyncio.gather(tools.started.wait(), comments.started.wait()), 30)
    cut.set()
    with pytest.raises(Paused):
        await asyncio.wait_for(looping, 10)
    last = run.llm.messages[-1]
    assert last["role"] == "tool" and "interrupted" in str(last["content"]), last
    assert "interrupted" in run.lines("tools.jsonl")[-1]["result"]
    await asyncio.wait_for(comments.cancelled.wait(), 10)  # the cut run does not wait for the forge

"""Everything SPEC 8 adds to one run, behind the few calls the runner makes.

`RunControl` is the run's `Steering`: at every checkpoint it asks, in this order,
"pause?" (signal file, operator request, shutdown), "stop?" (operator request, bot
unassigned) and "new comments?" (sent to the model as one user message), and at the
start of each iteration it writes the crash checkpoint. It also owns the run's progress
comment, guards the final comment with the state store, and publishes the two endings
that are not done/failed: pause and stop.

`RunControls` is what every run of a process shares (its settings and the shutdown
signal every run watches).
"""

from __future__ import annotations

import logging
import time
import weakref
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Protocol

from coding_agent.agent.loop import Checkpoint, LoopOutcome, ToolRunner
from coding_agent.agent.progress import ProgressComment, ProgressTools
from coding_agent.agent.steering.comments import CommentDetector, TrustLookup, thread_comments
from coding_agent.agent.steering.pause import PauseWatch, ShutdownSignal, pause_signal_path
from coding_agent.agent.steering.signals import RunInterrupted, RunPaused, RunStopped
from coding_agent.agent.steering.state import RunState, StateWriter, workspace_branch
from coding_agent.agent.steering.stop import StopChecker
from coding_agent.config import AgentConfig
from coding_agent.context.storage import ContextStorage, RunContextFiles
from coding_agent.domain.ports import RunStore
from coding_agent.domain.runs import RunMarks, RunRecord
from coding_agent.domain.tasks import Comment, Task, Thread
from coding_agent.errors import AgentError
from coding_agent.llm.base import LLMClient
from coding_agent.llm.protocols import DONE_TOOL
from coding_agent.llm.types import LLMReply, TokenUsage, ToolCallRequest
from coding_agent.prompts.notices import notice
from coding_agent.redaction import Redactor
from coding_agent.sources.base import Source
from coding_agent.sources.lifecycle import transition

__all__ = ["RunControls", "RunControl", "Continuation", "ControlReporter", "pending_reply"]

log = logging.getLogger(__name__)


class IssueWriter(Protocol):
    """The runner's reporter: posts comments on the task, redacted."""

    async def step_comment(self, text: str) -> None: ...

    async def final_comment(self, text: str) -> None: ...


@dataclass(frozen=True)
class Continuation:
    """An existing run to carry on: resumed after a pause, or taken over after a crash.

    `state` is None when nothing is left to do but publish an outcome the run had
    already recorded (`marks.final_status`).
    """

    run: RunRecord
    state: RunState | None
    marks: RunMarks
    workspace: Path

    def reopen(self, storage: ContextStorage) -> tuple[RunContextFiles, Path] | None:
        """The run's context files, back in `running/`, and its workspace; None if gone."""
        files = storage.reopen(self.run.uuid, self.state.messages if self.state is not None else None)
        return (files, self.workspace) if files is not None else None


def pending_reply(messages: list[dict[str, Any]]) -> LLMReply | None:
    """The last reply, when the history ends with it: received, but not acted on yet."""
    if not messages or messages[-1].get("role") != "assistant":
        return None
    last = messages[-1]
    calls = []
    for call in last.get("tool_calls") or []:
        function = call.get("function") or {}
        arguments = function.get("arguments")
        calls.append(
            ToolCallRequest(
                id=str(call.get("id", "")),
                name=str(function.get("name", "")),
                arguments=arguments if isinstance(arguments, dict) else {},
            )
        )
    return LLMReply(content=str(last.get("content") or ""), tool_calls=tuple(calls))


def _now_iso() -> str:
    return datetime.now(timezone.utc).replace(microsecond=0).isoformat()


class ControlReporter:
    """The reporter the loop and the runner use: step comments folded into the progress
    comment (when enabled), and a final comment that is posted once per run, ever."""

    def __init__(self, control: RunControl, inner: IssueWriter) -> None:
        self._control = control
        self._inner = inner

    async def step_comment(self, text: str) -> None:
        progress = self._control.progress
        if progress is None:
            await self._inner.step_comment(text)
            return
        progress.note_step(text)
        await progress.refresh()

    async def final_comment(self, text: str) -> None:
        await self._control.post_final(text, self._inner)


class RunControls:
    """What the runs of one worker process share; one per process."""

    def __init__(
        self,
        config: AgentConfig,
        store: RunStore,
        redactor: Redactor,
        owner: str,
        shutdown: ShutdownSignal | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.config = config
        self.store = store
        self.redactor = redactor
        self.owner = owner
        self.shutdown = shutdown or ShutdownSignal()
        self.signal_file = pause_signal_path(config)
        self.clock = clock
        # The runs of this process by task key, for webhooks to steer (`nudge`).
        self.active: weakref.WeakValueDictionary[str, RunControl] = weakref.WeakValueDictionary()

    def nudge(self, task_key: str) -> bool:
        """A webhook reported a comment or an (un)assignment on `task_key`: its run here,
        if any, asks the forge at its next checkpoint. False when no run of it is here."""
        control = self.active.get(task_key)
        if control is None:
            return False
        control.nudge()
        return True


class RunControl:
    """Steering, progress and the pause/stop endings of one run.

    `inner` posts the run's comments (the runner's reporter); `continuation` is the run
    being carried on, if it is not a new one.
    """

    def __init__(
        self,
        controls: RunControls,
        source: Source,
        task: Task,
        files: RunContextFiles,
        workspace: Path,
        requester: str | None,
        inner: IssueWriter,
        continuation: Continuation | None,
    ) -> None:
        config = controls.config
        self._controls = controls
        self._store = controls.store
        self._redactor = controls.redactor
        self._language = config.language
        self._source = source
        self._task = task
        self._key = str(task.key)
        self.files = files
        self.run_uuid = files.run_uuid
        self._workspace = workspace
        self._requester = requester
        self._continuation = continuation
        self._state = continuation.state if continuation is not None else None
        self.steps = self._state.steps if self._state is not None else 0
        bot = (source.bot_name or "").casefold()
        self._detector = CommentDetector(source, task.key, source.bot_name, config.comment_detection.enabled)
        self._stop = StopChecker(
            source,
            task.key,
            source.bot_name,
            config.task_stop,
            initially_assigned=bool(bot) and any(name.casefold() == bot for name in task.assignees),
            clock=controls.clock,
        )
        self._pause = PauseWatch(
            config.pause_resume.enabled,
            controls.signal_file,
            controls.shutdown,
            lambda: self._store.control_request(self._key),
        )
        self._writer = StateWriter(self._redactor)
        self._inner = inner
        controls.active[self._key] = self
        # Seeded so that the first checkpoint, whichever it is, asks the forge.
        self._previous_point = Checkpoint.ITERATION_START
        # Planning mode (SPEC 10.4) plugs in here: where the run stands (for the stop
        # comment) and its state (saved with every checkpoint and pause).
        self.describe_position: Callable[[], str] = lambda: ""
        self.planning_state: Callable[[], dict[str, Any] | None] = lambda: None
        self.progress: ProgressComment | None = None
        if config.progress_comment.enabled:
            self.progress = ProgressComment(
                source,
                task.key,
                self._redactor,
                self._language,
                self.run_uuid,
                config.progress_comment.min_edit_interval_seconds,
                on_created=lambda comment_id: self._store.set_progress_comment(self.run_uuid, comment_id),
            )

    def nudge(self) -> None:
        """See `RunControls.nudge`."""
        self._stop.nudge()

    # -- setting the run up --------------------------------------------------------

    def restore(self, llm: LLMClient) -> bool:
        """Load the saved history into `llm` (a continued run); False for a new run."""
        if self._state is None:
            return False
        llm.messages[:] = [dict(message) for message in self._state.messages]
        llm.usage = TokenUsage(self._state.prompt_tokens, self._state.completion_tokens)
        return True

    def pending_reply(self, llm: LLMClient) -> LLMReply | None:
        """A continued run paused between a reply and its action resumes with that action."""
        return pending_reply(llm.messages) if self._state is not None else None

    @property
    def continued(self) -> bool:
        """Is this run carried on from a saved state (resumed or taken over)?"""
        return self._state is not None

    def saved_planning(self) -> dict[str, Any] | None:
        """The planning state a continued run saved (None for a new run, or none saved)."""
        return self._state.planning if self._state is not None else None

    def recorded_outcome(self) -> LoopOutcome | None:
        """The outcome a previous worker of this run recorded before dying, if any.

        A recorded stop is re-raised, so the runner finishes it as a stop.
        """
        marks = self._continuation.marks if self._continuation is not None else None
        if marks is None or marks.final_status is None:
            return None
        if marks.final_status == "stopped":
            raise RunStopped("operator")
        status = "done" if marks.final_status == "done" else "failed"
        return LoopOutcome(status, marks.final_body or "", self.steps)

    async def begin(self, comments: list[Comment], threads: list[Thread], trust: TrustLookup | None) -> None:
        """Before the loop: comment detection's known ids, the progress comment."""
        self._detector.trust = trust
        state = self._state
        if state is None:
            self._detector.initialize([*comments, *thread_comments(threads)])
        elif not self._detector.restore_state(state.steering.get("comments")):
            await self._detector.initialize_from_forge()
        if state is not None:
            self._stop.restore_state(state.steering.get("stop"))
        if self.progress is not None:
            if state is not None:
                self.progress.restore_state(state.progress)
            if self.progress.comment_id is None and self._continuation is not None:
                self.progress.comment_id = self._continuation.marks.progress_comment_id
            self.progress.note_steps(self.steps)
            await self.progress.start()

    def reporter(self) -> ControlReporter:
        """The reporter the loop and the publication use."""
        return ControlReporter(self, self._inner)

    def tools(self, hub: ToolRunner) -> ToolRunner:
        """What the loop calls tools through: `hub`, noting each call in the progress comment."""
        return hub if self.progress is None else ProgressTools(hub, self.progress)

    def on_step(self, steps: int) -> None:
        self.steps = steps
        if self.progress is not None:
            self.progress.note_steps(steps)

    # -- the checkpoint ------------------------------------------------------------

    async def checkpoint(self, point: Checkpoint, llm: LLMClient) -> None:
        """Pause, then stop, then new comments (SPEC 8, seed 002 S8); then the crash checkpoint."""
        request = self._pause.operator_request()
        paused = self._pause.pause_for(request)
        if paused is not None:
            raise paused
        if request == "stop":
            raise RunStopped("operator")
        # An iteration starts right after the previous one's last checkpoint, with no reply
        # and no tool in between: the forge is not asked the same again (SPEC 13).
        asked_just_now = point is Checkpoint.ITERATION_START and self._previous_point is not Checkpoint.ITERATION_START
        self._previous_point = point
        if not asked_just_now:
            # The iteration a checkpoint belongs to: the one about to ask for step steps+1,
            # or the one whose reply (step `steps`) was just received.
            iteration = self.steps + 1 if point is Checkpoint.ITERATION_START else self.steps
            if await self._stop.bot_unassigned(iteration):
                raise RunStopped("unassigned")
            if _takes_user_message(llm):
                await self._detector.deliver(llm, await self._detector.check())
        if point is Checkpoint.ITERATION_START:
            self._writer.checkpoint(self.files.directory, self._snapshot(llm))

    def _snapshot(self, llm: LLMClient, paused: dict[str, Any] | None = None) -> RunState:
        return RunState(
            run_uuid=self.run_uuid,
            task_key=self._key,
            requester=self._requester,
            workspace=str(self._workspace),
            branch=workspace_branch(self._workspace) or self._task.head_branch,
            steps=self.steps,
            messages=llm.messages,
            prompt_tokens=llm.usage.prompt_tokens,
            completion_tokens=llm.usage.completion_tokens,
            steering={"comments": self._detector.get_state(), "stop": self._stop.get_state()},
            progress=self.progress.get_state() if self.progress is not None else {},
            paused=paused,
            planning=self.planning_state(),
        )

    # -- publishing ----------------------------------------------------------------

    def record_outcome(self, outcome: LoopOutcome) -> None:
        """Remember the outcome before publishing it: a worker taking over publishes it too."""
        self._store.record_final(self.run_uuid, outcome.status, outcome.comment)

    async def post_final(self, text: str, inner: IssueWriter) -> None:
        """The run's final comment, at most once: the state store says whether it is out."""
        marks = self._store.run_marks(self.run_uuid)
        if marks.final_posted:
            log.info("%s: run %s already has its final comment", self._key, self.run_uuid)
            return
        inherited = self._continuation is not None and self._continuation.marks.final_status is not None
        if inherited and await self._final_already_posted(text):
            log.info("%s: the final comment of run %s was posted before the takeover", self._key, self.run_uuid)
        else:
            await inner.final_comment(text)
        self._store.mark_final_posted(self.run_uuid)

    async def _final_already_posted(self, text: str) -> bool:
        """Did the worker that died post this final comment before it could say so?"""
        expected = self._redactor.text(text).strip()
        try:
            comments = await self._source.list_comments(self._task.key)
        except AgentError as error:
            log.warning("%s: could not look for an earlier final comment: %s", self._key, error)
            return False
        return any(self._detector.is_bot_comment(c) and c.body.strip() == expected for c in comments)

    async def finished(self, status: str) -> None:
        """After the final comment and label: the progress comment's last state."""
        if self.progress is not None:
            await self.progress.finish(status)

    async def interrupted(self, error: RunInterrupted, llm: LLMClient | None) -> tuple[str, Path]:
        """Publish a pause or a stop; returns (run status, context directory)."""
        if isinstance(error, RunPaused) and llm is not None:
            return await self._pause_run(error, llm)
        if isinstance(error, RunStopped):
            return await self._stop_run(error)
        # LeaseLost: another worker has this task (and maybe this very run) now.
        log.warning("%s: run %s gave the task up (%s)", self._key, self.run_uuid, error)
        if self.progress is not None:
            await self.progress.discard()
        return "abandoned", self.files.directory

    async def _pause_run(self, error: RunPaused, llm: LLMClient) -> tuple[str, Path]:
        at = _now_iso()
        state = self._snapshot(llm, paused={"reason": error.reason, "hold": error.hold, "at": at})
        self._writer.save_complete(self.files.directory, state)
        self._store.pause_run(self.run_uuid, self.steps, error.hold)
        if error.reason == "operator":
            self._store.clear_control_request(self._key)
        resume = notice("resume_manual", self._language, key=self._key) if error.hold else notice("resume_auto", self._language)
        text = notice(
            "paused",
            self._language,
            reason=notice(f"pause_reason_{error.reason}", self._language),
            time=at,
            turns=self.steps,
            resume=resume,
        )
        labels = self._source.labels
        try:
            if self.progress is not None:
                await self.progress.finish("paused")
            await self._source.post_comment(self._task.key, self._redactor.text(text))
            await transition(self._source, self._task.key, labels.paused_label, [labels.processing_label])
        except AgentError as failure:
            log.error("%s: could not publish the pause: %s", self._key, self._redactor.text(str(failure)))
        self.files.write_metadata(status="paused", steps=self.steps)
        directory = self.files.move_to("paused")
        self._store.release_lease(self._key, self._controls.owner)
        log.info("%s: run %s paused (%s) after %d steps", self._key, self.run_uuid, error.reason, self.steps)
        return "paused", directory

    async def _stop_run(self, error: RunStopped) -> tuple[str, Path]:
        marks = self._store.run_marks(self.run_uuid)
        labels = self._source.labels
        if marks.final_status == "stopped" and marks.final_body:
            text = marks.final_body
        else:
            text = notice(
                "stopped",
                self._language,
                reason=notice(f"stop_reason_{error.reason}", self._language),
                time=_now_iso(),
                turns=self.steps,
                label=labels.bot_label,
            )
            position = self.describe_position()
            text = f"{text}\n\n{position}" if position else text
            self._store.record_final(self.run_uuid, "stopped", text)
        try:
            await self.post_final(text, self._inner)
            if self.progress is not None:
                await self.progress.finish("stopped")
            await transition(self._source, self._task.key, labels.stopped_label, [labels.processing_label])
        except AgentError as failure:
            log.error("%s: could not publish the stop: %s", self._key, self._redactor.text(str(failure)))
        if error.reason == "operator":
            self._store.clear_control_request(self._key)
        self.files.write_metadata(status="stopped", steps=self.steps)
        directory = self.files.move_to("completed")
        self._store.finish_run(self.run_uuid, "stopped", self.steps, None)
        self._store.release_lease(self._key, self._controls.owner)
        log.info("%s: run %s stopped (%s) after %d steps", self._key, self.run_uuid, error.reason, self.steps)
        return "stopped", directory


def _takes_user_message(llm: LLMClient) -> bool:
    """False right after a reply whose tool calls are about to run: a user message there
    would split the calls from their results, which strict servers reject. The comments
    are then picked up at the next checkpoint, right after the tool results. A `done`
    call alone runs nothing, so comments that arrive as the model finishes are sent."""
    last = llm.messages[-1] if llm.messages else None
    if last is None or last.get("role") != "assistant":
        return True
    calls = last.get("tool_calls") or []
    return all((call.get("function") or {}).get("name") == DONE_TOOL.name for call in calls)

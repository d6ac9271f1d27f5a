"""Everything SPEC 8 adds to one run, behind the few calls the runner makes.

`RunSteering` is the run's `Steering`: the loop consults its `checkpoint()` and is told,
as one `Decision`, whether to go on, pause or stop, and which new comments to append. It
owns the run's steering parts and hands each its collaborators when it builds them:
`interrupts.py` (pause and stop triggers), `comments.py` (new comments for the model),
`state.py` (the saved state and the crash checkpoint), `endings.py` (the final comment,
a pause's and a stop's publication), and the progress comment (`agent/progress.py`).

`RunControls` is what every run of one worker process shares.
"""

from __future__ import annotations

import asyncio
import time
import weakref
from collections.abc import Callable
from pathlib import Path
from typing import Any, Protocol, TypeVar

from coding_agent.agent.loop import CONTINUE, Checkpoint, Decision, LoopOutcome, ToolRunner, Verdict
from coding_agent.agent.loop_guard import LoopGuard
from coding_agent.agent.progress import ProgressComment, ProgressTools
from coding_agent.agent.steering.comments import CommentDetector, TrustLookup, thread_comments
from coding_agent.agent.steering.endings import IssueWriter, RunEndings, RunReporter, StoreCall
from coding_agent.agent.steering.interrupts import (
    PauseWatch,
    RunInterrupted,
    RunPaused,
    RunStopped,
    ShutdownSignal,
    StopChecker,
    StoreRequests,
    pause_signal_path,
)
from coding_agent.agent.steering.state import Continuation, RunSaver, Standing, pending_reply
from coding_agent.config import AgentConfig
from coding_agent.context.storage import CommentRead, RunContextFiles
from coding_agent.domain.ports import RunCheckout, RunStore
from coding_agent.domain.tasks import Comment, Task, Thread
from coding_agent.llm.base import LLMClient
from coding_agent.llm.protocols import DONE_TOOL
from coding_agent.llm.types import LLMReply
from coding_agent.redaction import Redactor
from coding_agent.sources.base import Source

__all__ = ["RunControls", "RunSteering", "RunLease", "PlanningHooks", "in_thread"]

T = TypeVar("T")


async def in_thread(call: Callable[..., T], *args: Any) -> T:
    """A `StoreCall` that only moves the call off the event loop (runs steered alone, in benchmarks)."""
    return await asyncio.to_thread(call, *args)


class RunLease(Protocol):
    """The run's hold on its task (the runner's `RunLedger`): every store call goes
    through `stored`, and each checkpoint first makes sure the lease is still the run's."""

    async def stored(self, call: Callable[..., T], *args: Any) -> T: ...

    def check_lease(self) -> None: ...

    async def await_step_write(self) -> None: ...

    async def confirm_after_outage(self) -> None: ...

    def step(self, steps: int) -> None: ...


class PlanningHooks(Protocol):
    """Planning mode (SPEC 10.4), as steering sees it: where the run stands (for the stop
    comment) and its state (saved with every checkpoint and pause)."""

    def describe(self) -> str: ...

    def get_state(self) -> dict[str, Any] | None: ...


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
        # The daily budgets (SPEC 11.5), set by the runtime: (task key, requester) -> the
        # comment of the budget that holds the task's run now, or None. A blocking store read.
        self.budget: Callable[[str, str | None], str | None] | None = None
        # The runs of this process by task key, for webhooks to steer (`nudge`).
        self.active: weakref.WeakValueDictionary[str, RunSteering] = weakref.WeakValueDictionary()

    def nudge(self, task_key: str) -> bool:
        """A webhook reported a comment or an (un)assignment on `task_key`: its run here,
        if any, asks the forge at its next checkpoint. False when no run of it is here."""
        steering = self.active.get(task_key)
        if steering is None:
            return False
        steering.nudge()
        return True


class RunSteering:
    """Steering, progress and the pause/stop endings of one run.

    `inner` posts the run's comments (the runner's reporter); `continuation` is the run
    being carried on, if it is not a new one; `work` is its clone (a pause pushes its WIP
    commit); `lease` is the run's hold on the task (None: store calls in a thread, no
    lease to check).
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
        work: RunCheckout | None = None,
        lease: RunLease | None = None,
    ) -> None:
        config = controls.config
        self._controls = controls
        self._continuation = continuation
        self._state = state = continuation.state if continuation is not None else None
        self._work = work
        self._lease = lease
        self._stored: StoreCall = lease.stored if lease is not None else in_thread
        self._planning: PlanningHooks | None = None
        self._key, self._requester = str(task.key), requester
        self.files = files
        self.run_uuid = files.run_uuid
        self.steps = state.steps if state is not None else 0
        self._detector = CommentDetector(source, task.key, source.bot_name, config.comment_detection.enabled)
        self._stop = self._stop_checker(source, task)
        self._pause = PauseWatch(
            config.pause_resume.enabled,
            controls.signal_file,
            controls.shutdown,
            StoreRequests(controls.store, str(task.key), self.nudge),
            stored=self._stored,
        )
        controls.active[str(task.key)] = self
        # The loop guard's counts are saved with the run and continue after a resume (SPEC 4).
        guard = config.loop_guard
        self.loop_guard = LoopGuard(guard.enabled, guard.warn_after, guard.fail_after, config.language)
        if state is not None:
            self.loop_guard.restore_state(state.steering.get("loop_guard"))
        self.progress = self._progress_comment(source, task) if config.progress_comment.enabled else None
        self._saver = RunSaver(files, controls.redactor, workspace, task, requester, state, self._standing)
        self._endings = RunEndings(
            controls.store,
            self._stored,
            controls.owner,
            source,
            task,
            files,
            controls.redactor,
            config.language,
            continuation,
            self._detector,
            inner,
            controls.shutdown,
        )
        self._reporter = RunReporter(self._endings, self.progress, inner)
        # Seeded so that the first checkpoint, whichever it is, asks the forge (None: the
        # run's start has just asked, see `begin`).
        self._previous_point: Checkpoint | None = Checkpoint.ITERATION_START
        self._comments_owed = False  # a checkpoint passed without asking for comments (`_new_comments`)

    def _stop_checker(self, source: Source, task: Task) -> StopChecker:
        bot = (source.bot_name or "").casefold()
        return StopChecker(
            source,
            task.key,
            source.bot_name,
            self._controls.config.task_stop,
            initially_assigned=bool(bot) and any(name.casefold() == bot for name in task.assignees),
            clock=self._controls.clock,
            stop_label=source.labels.stop_label,
        )

    def _progress_comment(self, source: Source, task: Task) -> ProgressComment:
        controls, settings = self._controls, self._controls.config.progress_comment
        return ProgressComment(
            source,
            task.key,
            controls.redactor,
            controls.config.language,
            self.run_uuid,
            settings.min_edit_interval_seconds,
            on_created=lambda comment_id: self._stored(
                controls.store.steering.set_progress_comment, self.run_uuid, comment_id
            ),
        )

    def _standing(self) -> Standing:
        return Standing(
            steps=self.steps,
            steering={
                "comments": self._detector.get_state(),
                "stop": self._stop.get_state(),
                "loop_guard": self.loop_guard.get_state(),
            },
            progress=self.progress.get_state() if self.progress is not None else {},
            planning=self._planning.get_state() if self._planning is not None else None,
        )

    def nudge(self) -> None:
        """See `RunControls.nudge` (a webhook in this process) and `StoreRequests` (in
        another): re-read the assignees at the next checkpoint."""
        self._stop.nudge()

    # -- setting the run up --------------------------------------------------------

    @property
    def continued(self) -> bool:
        """Is this run carried on from a saved state (resumed or taken over)?"""
        return self._state is not None

    def saved_planning(self) -> dict[str, Any] | None:
        """The planning state a continued run saved (None for a new run, or none saved)."""
        return self._state.planning if self._state is not None else None

    def plan_with(self, planning: PlanningHooks) -> None:
        """Planning mode's policy, made once the run's clone is ready: its position goes
        into the stop comment, its state into every save."""
        self._planning = planning

    def restore(self, llm: LLMClient) -> bool:
        """Load the saved history into `llm` (a continued run); False for a new run."""
        return self._continuation.restore(llm) if self._continuation is not None else False

    def pending_reply(self, llm: LLMClient) -> LLMReply | None:
        """A continued run paused between a reply and its action resumes with that action."""
        return pending_reply(llm.messages) if self._state is not None else None

    def recorded_outcome(self) -> LoopOutcome | None:
        """The outcome a previous worker of this run recorded before dying, if any
        (a recorded stop is re-raised, so the runner finishes it as a stop)."""
        return self._continuation.recorded_outcome(self.steps) if self._continuation is not None else None

    async def begin(self, comments: list[Comment], threads: list[Thread], trust: TrustLookup | None) -> None:
        """Before the loop: comment detection's known ids, the progress comment. A new
        run's `comments` and `threads` were listed a moment ago, for its first prompt:
        its first iteration starts right after that, and the forge is not asked the same
        again. Its first stop check comes with the first reply, before any tool runs."""
        self._detector.trust = trust
        state = self._state
        if state is None:
            self._detector.initialize([*comments, *thread_comments(threads)])
            self._previous_point = None
        elif not self._detector.restore_state(state.steering.get("comments")):
            await self._detector.initialize_from_forge()
        if state is not None:
            self._stop.restore_state(state.steering.get("stop"))
        progress = self.progress
        if progress is not None:
            if state is not None:
                progress.restore_state(state.progress)
            self._adopt_progress_comment()
            progress.note_steps(self.steps)
            await progress.start()

    def _adopt_progress_comment(self) -> None:
        """A continued run edits the progress comment its earlier worker posted."""
        if self.progress is not None and self.progress.comment_id is None and self._continuation is not None:
            self.progress.comment_id = self._continuation.marks.progress_comment_id

    def reporter(self) -> RunReporter:
        """The reporter the loop and the publication use."""
        return self._reporter

    def tools(self, hub: ToolRunner) -> ToolRunner:
        """What the loop calls tools through: `hub`, noting each call in the progress comment."""
        return hub if self.progress is None else ProgressTools(hub, self.progress)

    def on_step(self, steps: int) -> None:
        """A reply came: the lease's progress write, then the run's own count."""
        if self._lease is not None:
            self._lease.step(steps)
        self.steps = steps
        if self.progress is not None:
            self.progress.note_steps(steps)

    async def cut(self) -> Exception:
        """Returns once a shutdown's grace is over (SPEC 8.3): the model request or tool
        call in flight is then given up, and the run pauses as it stood before it."""
        await self._controls.shutdown.wait_cut()
        return RunPaused("shutdown", hold=False)

    # -- the checkpoint ------------------------------------------------------------

    async def checkpoint(self, point: Checkpoint, llm: LLMClient) -> Decision:
        """The lease, then pause, then stop, then (at the start of an iteration) a daily
        budget's pause (SPEC 11.5), the crash checkpoint and new comments (SPEC 8, seed 002 S8).

        The step's progress write (started when the reply came, in a thread) is awaited
        first, so a lease found taken stops the run before the reply is acted on. The
        crash checkpoint is written before the comment check, so a saved state never
        holds comments the saved history has not seen: a worker that takes the run over
        detects them again and sends them once."""
        if self._lease is not None:
            self._lease.check_lease()
            await self._lease.await_step_write()
            await self._lease.confirm_after_outage()
        request = await self._pause.operator_request()
        paused = self._pause.pause_for(request)
        if paused is not None:
            return Decision(Verdict.PAUSE, ending=paused)
        if request == "stop":
            return Decision(Verdict.STOP, ending=RunStopped("operator"))
        budget = self._controls.budget
        if budget is not None and point is Checkpoint.ITERATION_START:  # the step before is done
            comment = await self._stored(budget, self._key, self._requester)
            if comment is not None:
                return Decision(Verdict.PAUSE, ending=RunPaused("budget", hold=False, comment=comment))
        # An iteration starts right after the previous one's last checkpoint (or the run's
        # start), with no reply and no tool in between: the forge is not asked the same
        # again (SPEC 13).
        asked_just_now = point is Checkpoint.ITERATION_START and self._previous_point is not Checkpoint.ITERATION_START
        self._previous_point = point
        if not asked_just_now:
            # The iteration a checkpoint belongs to: the one about to ask for step steps+1,
            # or the one whose reply (step `steps`) was just received.
            iteration = self.steps + 1 if point is Checkpoint.ITERATION_START else self.steps
            reason = await self._stop.stop_reason(iteration)
            if reason is not None:
                return Decision(Verdict.STOP, ending=RunStopped(reason))
        if point is Checkpoint.ITERATION_START:
            self._saver.checkpoint(llm)
        return await self._new_comments(point, llm, asked_just_now)

    async def _new_comments(self, point: Checkpoint, llm: LLMClient, asked_just_now: bool) -> Decision:
        """New comments for the model, when this checkpoint is where they can go.

        Not before a reply's tools run: `AFTER_TOOL` comes right after them, and what the
        forge says then reaches the model in the same next request; asking before as well
        would cost a listing per step for nothing. Not where a user message would split
        tool calls from their results (`_takes_user_message`). A checkpoint that passed
        for either reason leaves the comments owed: the next that can take them asks,
        even the start of an iteration that otherwise follows a listing at once."""
        if point is Checkpoint.BEFORE_TOOLS or not _takes_user_message(llm):
            self._comments_owed = True
            return CONTINUE
        if asked_just_now and not self._comments_owed:
            return CONTINUE
        self._comments_owed = False
        comments = await self._detector.check()
        message = await self._detector.message(comments)
        if message is None:
            return CONTINUE
        # Recorded as the model is sent them: the task page reads these, not the message.
        self.files.record_comments([CommentRead.of(comment) for comment in comments], "new_comments")
        return Decision(messages=(message,))

    # -- publishing ----------------------------------------------------------------

    async def publish(self, outcome: LoopOutcome) -> tuple[str, Path]:
        """Publish a done or failed outcome and end the run; returns (run status, context
        directory), "finishing" when the next cycle is to publish it again. A run
        continued only to publish its recorded outcome never ran `begin`: its progress
        comment is adopted here."""
        self._adopt_progress_comment()
        return await self._endings.publish(outcome, self.progress)

    async def interrupted(self, error: RunInterrupted, llm: LLMClient | None) -> tuple[str, Path]:
        """Publish a pause or a stop; returns (run status, context directory)."""
        if isinstance(error, RunPaused) and llm is not None:
            directory = await self._endings.pause(error, llm, self.steps, self._saver, self._work, self.progress)
            return "paused", directory
        if isinstance(error, RunStopped):
            position = self._planning.describe() if self._planning is not None else ""
            return "stopped", await self._endings.stop(error, self.steps, position, self.progress)
        return "abandoned", await self._endings.abandon(error, self.steps, self.progress)


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

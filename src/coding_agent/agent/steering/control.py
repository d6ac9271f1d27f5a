"""Everything SPEC 8 adds to one run, behind the few calls the runner makes.

`RunControl` is the run's `Steering` and the runner's one handle on steering. It wires
the parts, each in its own module with one job, and delegates:

- checkpoint.py: the loop's `checkpoint()`: pause, stop, crash checkpoint, new comments,
  answered as one `Decision`;
- pause.py, stop.py, comments.py: the three questions a checkpoint asks;
- nudges.py: a webhook's nudge from another process, read with the operator's requests;
- saving.py: the run's saved state (crash checkpoint, pause);
- continuation.py: carrying a paused or taken-over run on;
- final.py: the final comment, at most once, and the reporter around it;
- endings.py: publishing a pause or a stop;
- progress (`agent/progress.py`): the progress comment.

`RunControls` (scope.py) is what every run of a process shares.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

from coding_agent.agent.loop import Checkpoint, Decision, LoopOutcome, ToolRunner
from coding_agent.agent.loop_guard import LoopGuard
from coding_agent.agent.progress import ProgressComment, ProgressTools
from coding_agent.agent.steering.checkpoint import Checkpointer
from coding_agent.agent.steering.comments import CommentDetector, TrustLookup, thread_comments
from coding_agent.agent.steering.continuation import Continuation, pending_reply
from coding_agent.agent.steering.endings import Endings
from coding_agent.agent.steering.final import ControlReporter, FinalComment, IssueWriter
from coding_agent.agent.steering.nudges import StoreRequests
from coding_agent.agent.steering.pause import PauseWatch
from coding_agent.agent.steering.saving import RunSaver
from coding_agent.agent.steering.scope import RunControls, RunScope, StoreCall, in_thread
from coding_agent.agent.steering.signals import RunInterrupted
from coding_agent.agent.steering.stop import StopChecker
from coding_agent.context.storage import RunContextFiles
from coding_agent.domain.runs import PausedWork
from coding_agent.domain.tasks import Comment, Task, Thread
from coding_agent.llm.base import LLMClient
from coding_agent.llm.types import LLMReply
from coding_agent.sources.base import Source

__all__ = ["RunControls", "RunControl", "Continuation", "ControlReporter", "pending_reply"]


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
        stored: StoreCall = in_thread,
    ) -> None:
        """`stored`: how the run's parts call the store (the runner's ledger: waiting
        through an outage, then confirming the lease)."""
        config = controls.config
        state = continuation.state if continuation is not None else None
        scope = RunScope(controls, source, task, files, workspace, requester, continuation, stored=stored)
        scope.steps = state.steps if state is not None else 0
        self._scope = scope
        self._state = state
        self._inner = inner
        self.files = files
        self.run_uuid = files.run_uuid
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
        pause = PauseWatch(
            config.pause_resume.enabled,
            controls.signal_file,
            controls.shutdown,
            StoreRequests(controls.store, scope.key, self.nudge),
            stored=stored,
        )
        controls.active[scope.key] = self
        settings = config.loop_guard
        # The loop guard's counts are saved with the run and continue after a resume (SPEC 4).
        self.loop_guard = LoopGuard(settings.enabled, settings.warn_after, settings.fail_after, config.language)
        if state is not None:
            self.loop_guard.restore_state(state.steering.get("loop_guard"))
        saver = RunSaver(scope, self._detector, self._stop, self.loop_guard)
        self._checkpointer = Checkpointer(scope, pause, self._stop, self._detector, saver)
        self._final = FinalComment(scope, self._detector)
        self._endings = Endings(scope, saver, self._final, inner)
        if config.progress_comment.enabled:
            scope.progress = ProgressComment(
                source,
                task.key,
                controls.redactor,
                config.language,
                self.run_uuid,
                config.progress_comment.min_edit_interval_seconds,
                on_created=lambda comment_id: stored(controls.store.set_progress_comment, self.run_uuid, comment_id),
            )

    @property
    def steps(self) -> int:
        return self._scope.steps

    @property
    def progress(self) -> ProgressComment | None:
        return self._scope.progress

    @progress.setter
    def progress(self, value: ProgressComment | None) -> None:
        self._scope.progress = value

    @property
    def describe_position(self) -> Callable[[], str]:
        """Planning mode's hook: where the run stands, for the stop comment."""
        return self._scope.describe_position

    @describe_position.setter
    def describe_position(self, value: Callable[[], str]) -> None:
        self._scope.describe_position = value

    @property
    def planning_state(self) -> Callable[[], dict[str, Any] | None]:
        """Planning mode's hook: its state, saved with every checkpoint and pause."""
        return self._scope.planning_state

    @planning_state.setter
    def planning_state(self, value: Callable[[], dict[str, Any] | None]) -> None:
        self._scope.planning_state = value

    @property
    def save_work(self) -> Callable[[], Awaitable[PausedWork | None]]:
        """The workspace's hook: at a pause, the WIP commit pushed to the task's branch."""
        return self._scope.save_work

    @save_work.setter
    def save_work(self, value: Callable[[], Awaitable[PausedWork | None]]) -> None:
        self._scope.save_work = value

    def paused_work(self) -> PausedWork | None:
        """Where a continued run's files are (a pause's WIP commit); None for a new run."""
        continuation = self._scope.continuation
        return continuation.paused_work() if continuation is not None else None

    def nudge(self) -> None:
        """See `RunControls.nudge` (a webhook in this process) and `nudges.py` (in another):
        re-read the assignees at the next checkpoint."""
        self._stop.nudge()

    # -- setting the run up --------------------------------------------------------

    def restore(self, llm: LLMClient) -> bool:
        """Load the saved history into `llm` (a continued run); False for a new run."""
        continuation = self._scope.continuation
        return continuation.restore(llm) if continuation is not None else False

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
        """The outcome a previous worker of this run recorded before dying, if any
        (a recorded stop is re-raised, so the runner finishes it as a stop)."""
        continuation = self._scope.continuation
        return continuation.recorded_outcome(self.steps) if continuation is not None else None

    async def begin(self, comments: list[Comment], threads: list[Thread], trust: TrustLookup | None) -> None:
        """Before the loop: comment detection's known ids, the progress comment. A new
        run's `comments` and `threads` were listed a moment ago, for its first prompt."""
        self._detector.trust = trust
        state = self._state
        if state is None:
            self._detector.initialize([*comments, *thread_comments(threads)])
            self._checkpointer.start_read_the_conversation()
        elif not self._detector.restore_state(state.steering.get("comments")):
            await self._detector.initialize_from_forge()
        if state is not None:
            self._stop.restore_state(state.steering.get("stop"))
        progress = self.progress
        if progress is not None:
            if state is not None:
                progress.restore_state(state.progress)
            continuation = self._scope.continuation
            if progress.comment_id is None and continuation is not None:
                progress.comment_id = continuation.marks.progress_comment_id
            progress.note_steps(self.steps)
            await progress.start()

    def reporter(self) -> ControlReporter:
        """The reporter the loop and the publication use."""
        return ControlReporter(self._scope, self._final, self._inner)

    def tools(self, hub: ToolRunner) -> ToolRunner:
        """What the loop calls tools through: `hub`, noting each call in the progress comment."""
        return hub if self.progress is None else ProgressTools(hub, self.progress)

    def on_step(self, steps: int) -> None:
        self._scope.steps = steps
        if self.progress is not None:
            self.progress.note_steps(steps)

    # -- the checkpoint ------------------------------------------------------------

    async def checkpoint(self, point: Checkpoint, llm: LLMClient) -> Decision:
        """Pause, then stop, then the crash checkpoint and new comments (SPEC 8, seed 002 S8)."""
        return await self._checkpointer.decide(point, llm)

    # -- publishing ----------------------------------------------------------------

    async def record_outcome(self, outcome: LoopOutcome) -> None:
        """Remember the outcome before publishing it: a worker taking over publishes it too."""
        await self._final.record(outcome)

    async def finished(self, status: str) -> None:
        """After the final comment and label: the progress comment's last state."""
        if self.progress is not None:
            continuation = self._scope.continuation
            if self.progress.comment_id is None and continuation is not None:
                # A run continued only to publish its recorded outcome never ran `begin`.
                self.progress.comment_id = continuation.marks.progress_comment_id
            await self.progress.finish(status)

    async def interrupted(self, error: RunInterrupted, llm: LLMClient | None) -> tuple[str, Path]:
        """Publish a pause or a stop; returns (run status, context directory)."""
        return await self._endings.publish(error, llm)

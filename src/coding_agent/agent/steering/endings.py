"""How a run ends on its task: the final comment, posted at most once per run, ever; the
reporter around it; the publication of a done or failed outcome, of a pause and of a
stop (SPEC 7, 8.2, 8.3).

The outcome is recorded in the state store before it is published, so a worker taking a
run over publishes the same words; the store's mark says whether the comment is out; a
takeover whose predecessor died between posting and marking looks on the forge first.
Step comments fold into the progress comment when it is enabled.

A final comment the forge refuses for good (a 4xx: it will refuse it again) is replaced
by a failure notice that says why. Anything else that fails (5xx streaks, timeouts, a
forbidden label write) leaves the outcome to publish again: the run stays `finishing`,
without a lease, which is what `Recovery` takes over at any worker's next cycle; after
the last attempt the run gives up and ends the task failed as far as the forge lets it.

A pause saves everything, says so on the task with the resume hint, labels it paused and
leaves the context in `paused/`; a stop posts the stop notice as the final comment,
labels the task stopped and finishes the run. Either way the lease is released. A lost
lease publishes nothing: another worker has the task now; the run's own row is closed
`abandoned` unless that worker took the run itself over.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from dataclasses import replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Protocol

from coding_agent.agent.loop import LoopOutcome
from coding_agent.agent.progress import ProgressComment
from coding_agent.agent.steering.comments import CommentDetector
from coding_agent.agent.steering.interrupts import RunInterrupted, RunPaused, RunStopped, ShutdownSignal
from coding_agent.agent.steering.state import Continuation, RunSaver
from coding_agent.context.storage import RunContextFiles
from coding_agent.domain.ports import RunCheckout, RunStore
from coding_agent.domain.tasks import Task
from coding_agent.errors import AgentError, ForgeError
from coding_agent.llm.base import LLMClient
from coding_agent.prompts.notices import Language, notice
from coding_agent.redaction import Redactor
from coding_agent.retry import through_store_outage
from coding_agent.sources.base import Source
from coding_agent.sources.lifecycle import transition

__all__ = ["IssueWriter", "StoreCall", "RunEndings", "RunReporter", "MAX_PUBLISH_ATTEMPTS"]

log = logging.getLogger(__name__)

# Publications of an outcome (final comment, label) before the run gives up and ends failed.
MAX_PUBLISH_ATTEMPTS = 3

# How a run calls its store: `await stored(store.method, *args)`, the blocking call in a
# worker thread (the runner's is `RunLedger.stored`, which waits through an outage).
StoreCall = Callable[..., Awaitable[Any]]


class IssueWriter(Protocol):
    """The runner's reporter: posts comments on the task, redacted."""

    async def step_comment(self, text: str) -> None: ...

    async def final_comment(self, text: str) -> None: ...


# What a shutting-down pause keeps, of its time, for the state store's writes after its
# forge writes (the pause recorded, the lease released).
STORE_RESERVE_SECONDS = 1.5


def _now_iso() -> str:
    return datetime.now(UTC).replace(microsecond=0).isoformat()


class RunEndings:
    """The final comment of one run, and the publication of its pause or its stop."""

    def __init__(
        self,
        store: RunStore,
        stored: StoreCall,
        owner: str,
        source: Source,
        task: Task,
        files: RunContextFiles,
        redactor: Redactor,
        language: Language,
        continuation: Continuation | None,
        detector: CommentDetector,
        inner: IssueWriter,
        shutdown: ShutdownSignal | None = None,
    ) -> None:
        """`shutdown`: the process's; while it shuts down, a pause's forge writes are
        bounded by the time it has left (SPEC 8.3)."""
        self._shutdown = shutdown or ShutdownSignal()
        self._store, self._stored, self._owner = store, stored, owner
        self._source, self._task, self._files = source, task, files
        self._redactor, self._language = redactor, language
        self._continuation = continuation
        self._detector = detector
        self._inner = inner
        self._key = str(task.key)

    # -- the final comment ---------------------------------------------------------

    async def record(self, outcome: LoopOutcome) -> None:
        """Remember the outcome before publishing it: a worker taking over publishes it too."""
        await self._stored(self._store.steering.record_final, self._files.run_uuid, outcome.status, outcome.comment)

    async def post_final(self, text: str) -> None:
        """The run's final comment, at most once: the state store says whether it is out."""
        run_uuid = self._files.run_uuid
        marks = await self._stored(self._store.steering.run_marks, run_uuid)
        if marks.final_posted:
            log.info("%s: run %s already has its final comment", self._key, run_uuid)
            return
        inherited = self._continuation is not None and self._continuation.marks.final_status is not None
        if inherited and await self._already_posted(text):
            log.info("%s: the final comment of run %s was posted before the takeover", self._key, run_uuid)
        else:
            await self._inner.final_comment(text)
        await self._stored(self._store.steering.mark_final_posted, run_uuid)

    async def _already_posted(self, text: str) -> bool:
        """Did the worker that died post this final comment before it could say so?"""
        expected = self._redactor.text(text).strip()
        try:
            comments = await self._source.list_comments(self._task.key)
        except AgentError as error:
            log.warning("%s: could not look for an earlier final comment: %s", self._key, error)
            return False
        return any(self._detector.is_bot_comment(c) and c.body.strip() == expected for c in comments)

    # -- done or failed --------------------------------------------------------------

    async def publish(self, outcome: LoopOutcome, progress: ProgressComment | None) -> tuple[str, Path]:
        """Record the outcome, then publish it (final comment, label) and end the run:
        (run status, context directory); "finishing" when the forge failed us and the
        next cycle publishes it again."""
        # Redacted before anything stores it: the state store keeps the outcome to publish
        # (run_marks.final_body) and a failed run's reason (runs.error).
        outcome = replace(outcome, comment=self._redactor.text(outcome.comment))
        await self.record(outcome)
        status, failure = await self._publish_outcome(outcome)
        if status is None:
            attempts = int(self._files.metadata.get("publish_attempts", 0)) + 1
            if attempts < MAX_PUBLISH_ATTEMPTS:
                return "finishing", await self._leave_finishing(attempts)
            status = await self._give_up(attempts, failure)
        if progress is not None:
            await progress.finish(status)
        key, run_uuid = self._key, self._files.run_uuid
        self._files.write_metadata(status=status, steps=outcome.steps)
        directory = self._files.move_to("completed")
        error = None if status == "done" else outcome.comment
        await self._stored(self._store.runs.finish_run, run_uuid, status, outcome.steps, error)
        await self._stored(self._store.leases.release_lease, key, self._owner)
        log.info("%s: run %s ended %s after %d steps", key, run_uuid, status, outcome.steps)
        return status, directory

    async def _publish_outcome(self, outcome: LoopOutcome) -> tuple[str | None, str]:
        """Final comment and label: the run status, or None and why when the forge failed us."""
        labels, language = self._source.labels, self._language
        if outcome.status == "done":
            comment, label = outcome.comment.strip() or "Done.", labels.done_label
        else:
            comment = notice("failed", language, reason=outcome.comment, label=labels.failed_label)
            label = labels.failed_label
        status = outcome.status
        try:
            try:
                await self.post_final(comment)
            except ForgeError as refused:  # a 4xx (TransientError is not a ForgeError)
                reason = self._redactor.text(f"the forge refused the final comment: {refused}")
                log.error("%s: %s", self._key, reason)
                await self.post_final(notice("failed", language, reason=reason, label=labels.failed_label))
                status, label = "failed", labels.failed_label
            await transition(self._source, self._task.key, label, [labels.processing_label])
        except AgentError as error:
            failure = self._redactor.text(str(error))
            log.error("%s: could not publish the outcome (%s): %s", self._key, status, failure)
            return None, failure
        return status, ""

    async def _leave_finishing(self, attempts: int) -> Path:
        """The outcome is recorded (run_marks) but not out: let the next cycle publish it
        (the final comment is not posted twice: its posting is marked in the store)."""
        self._files.write_metadata(publish_attempts=attempts)
        await self._stored(self._store.leases.release_lease, self._key, self._owner)
        log.warning("%s: run %s is finishing; its outcome is published at the next cycle", self._key, self._files.run_uuid)
        return self._files.directory

    async def _give_up(self, attempts: int, failure: str) -> str:
        """After `attempts` failed publications: a failure comment and label, as far as the forge lets us."""
        labels, source, key = self._source.labels, self._source, self._task.key
        reason = f"the forge refused the run's outcome {attempts} times (last: {failure})"
        log.error("%s: %s; the run ends failed", key, reason)
        text = notice("failed", self._language, reason=reason, label=labels.failed_label)
        for write in (
            lambda: source.post_comment(key, self._redactor.text(text)),
            lambda: transition(source, key, labels.failed_label, [labels.processing_label]),
        ):
            try:
                await write()
            except AgentError as error:
                log.error("%s: %s", key, self._redactor.text(str(error)))
        return "failed"

    # -- pause and stop --------------------------------------------------------------

    async def pause(
        self,
        error: RunPaused,
        llm: LLMClient,
        steps: int,
        saver: RunSaver,
        work: RunCheckout | None,
        progress: ProgressComment | None,
    ) -> Path:
        """Save everything, say so on the task, label it paused; the context's new directory.

        In a shutdown each forge write (the WIP push, the comment and labels) is given up
        when the shutdown's time runs out, less a moment kept for the state store's writes
        after it: a forge that does not answer cannot keep the pause from being saved and
        the lease from being released (the next worker then resumes the run at once)."""
        language, key, run_uuid = self._language, self._key, self._files.run_uuid
        at = _now_iso()
        bounded, reserve = self._shutdown.bounded, STORE_RESERVE_SECONDS
        saved_work = await bounded(work.pause(run_uuid, steps), f"{key}: the WIP push", reserve) if work else None
        saver.save_paused(llm, {"reason": error.reason, "hold": error.hold, "at": at}, saved_work)
        await self._stored(self._store.steering.pause_run, run_uuid, steps, error.hold)
        if error.reason == "operator":
            await self._stored(self._store.steering.clear_control_request, key)
        resume = notice("resume_manual", language, key=key) if error.hold else notice("resume_auto", language)
        text = error.comment or notice(
            "paused",
            language,
            reason=notice(f"pause_reason_{error.reason}", language),
            time=at,
            turns=steps,
            resume=resume,
        )
        if saved_work is not None and saved_work.pushed and saved_work.commit:
            text += "\n\n" + notice("paused_work", language, branch=saved_work.branch, commit=saved_work.commit[:12])
        try:
            await bounded(self._announce_pause(text, progress), f"{key}: the pause comment and label", reserve)
        except AgentError as failure:
            log.error("%s: could not publish the pause: %s", key, self._redactor.text(str(failure)))
        self._files.write_metadata(status="paused", steps=steps)
        directory = self._files.move_to("paused")
        await self._stored(self._store.leases.release_lease, key, self._owner)
        log.info("%s: run %s paused (%s) after %d steps", key, run_uuid, error.reason, steps)
        return directory

    async def _announce_pause(self, text: str, progress: ProgressComment | None) -> None:
        """The pause on the task: the progress comment's last edit, the comment, the label."""
        labels = self._source.labels
        if progress is not None:
            await progress.finish("paused")
        await self._source.post_comment(self._task.key, self._redactor.text(text))
        await transition(self._source, self._task.key, labels.paused_label, [labels.processing_label])

    async def stop(self, error: RunStopped, steps: int, position: str, progress: ProgressComment | None) -> Path:
        """The stop notice as the final comment, the stopped label; the context's new directory.
        `position`: where the run stands (planning mode's words), added to the notice."""
        key, run_uuid = self._key, self._files.run_uuid
        marks = await self._stored(self._store.steering.run_marks, run_uuid)
        labels = self._source.labels
        if marks.final_status == "stopped" and marks.final_body:
            text = marks.final_body
        else:
            reason = notice(f"stop_reason_{error.reason}", self._language)
            text = notice(
                "stopped", self._language, reason=reason, time=_now_iso(), turns=steps, label=labels.bot_label
            )
            text = f"{text}\n\n{position}" if position else text
            await self._stored(self._store.steering.record_final, run_uuid, "stopped", text)
        try:
            await self.post_final(text)
            if progress is not None:
                await progress.finish("stopped")
            # The stop label has done its job once the run stopped: removed, so that labelling
            # the task again starts it again.
            removed = [labels.processing_label] + ([labels.stop_label] if error.reason == "stop_label" else [])
            await transition(self._source, self._task.key, labels.stopped_label, removed)
        except AgentError as failure:
            log.error("%s: could not publish the stop: %s", key, self._redactor.text(str(failure)))
        if error.reason == "operator":
            await self._stored(self._store.steering.clear_control_request, key)
        self._files.write_metadata(status="stopped", steps=steps)
        directory = self._files.move_to("completed")
        await self._stored(self._store.runs.finish_run, run_uuid, "stopped", steps, None)
        await self._stored(self._store.leases.release_lease, key, self._owner)
        log.info("%s: run %s stopped (%s) after %d steps", key, run_uuid, error.reason, steps)
        return directory

    async def abandon(self, error: RunInterrupted, steps: int, progress: ProgressComment | None) -> Path:
        """A lost lease: another worker has this task (and maybe this very run) now.

        Nothing is written on the task. The run's own row is closed `abandoned`, guarded by
        its id and this worker as its owner: left `running`, it would stay so for good when
        the new holder started a run of its own instead of taking this one over. When
        the new holder took this very run over, the row (and its files) are its own: the
        guard leaves them alone. Not through the ledger, which would stop at the lease."""
        run_uuid = self._files.run_uuid
        log.warning("%s: run %s gave the task up (%s)", self._key, run_uuid, error)
        if progress is not None:
            await progress.discard()
        reason = "its worker lost the task's lease to another worker"
        abandon = self._store.runs.abandon_own_run
        if not await through_store_outage(lambda: abandon(run_uuid, self._owner, steps, reason), self._key):
            return self._files.directory
        self._files.write_metadata(status="abandoned", steps=steps)
        return self._files.move_to("completed")


class RunReporter:
    """The reporter the loop and the runner use: step comments folded into the progress
    comment (when enabled), and a final comment that is posted once per run, ever."""

    def __init__(self, endings: RunEndings, progress: ProgressComment | None, inner: IssueWriter) -> None:
        self._endings = endings
        self._progress = progress
        self._inner = inner

    async def step_comment(self, text: str) -> None:
        if self._progress is None:
            await self._inner.step_comment(text)
            return
        self._progress.note_step(text)
        await self._progress.refresh()

    async def final_comment(self, text: str) -> None:
        await self._endings.post_final(text)

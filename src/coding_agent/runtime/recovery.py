"""Runs to carry on: paused runs whose pause is lifted, and runs whose worker died.

Both are found in the state store, never by a forge search: a paused run is a row with
status `paused` (and no `resume_hold`), a dead worker is a lease that expired without
being released or a `running` run without a live lease. Resuming is as cheap as a poll,
and a task that lost its worker in the middle of a claim (no run recorded yet) is found
too: labelled `processing`, it starts as a takeover (as the follow-up that was claimed,
when it was one: `FollowUpIntake.claim_cut_short`, so a review thread's request is read
and answered there); still carrying only the trigger label, it is claimed as new
(`Intake.claim_leased`).

Taking one is guarded twice: the task's lease (one worker at a time, as for any claim)
and a conditional status update of the run, so a paused run is resumed exactly once.
A run is continued from its saved state (`task_state.json`: the pause, or the crash
checkpoint of its last iteration); without one it is closed as `abandoned` (its progress
comment says so) and the task restarts cleanly as a new run.
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass
from pathlib import Path

from coding_agent.agent.progress import ProgressComment
from coding_agent.agent.steering import Continuation, RunControls, load_state
from coding_agent.config import AgentConfig
from coding_agent.context.storage import ContextStorage
from coding_agent.domain.runs import RunMarks, RunRecord
from coding_agent.domain.tasks import Task, TaskKey
from coding_agent.runtime.budgets import Budgets
from coding_agent.runtime.followups import FollowUpIntake
from coding_agent.runtime.intake import Claim, Intake
from coding_agent.sources.base import Source
from coding_agent.sources.lifecycle import transition
from coding_agent.store.state import StateStore

__all__ = ["Recovery", "Takeover"]

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Takeover(Claim):
    """A task this worker now holds (lease taken); `continuation` None: start a new run."""

    continuation: Continuation | None = None


class Recovery:
    """Finds and claims the runs to resume or take over."""

    def __init__(
        self,
        config: AgentConfig,
        store: StateStore,
        storage: ContextStorage,
        controls: RunControls,
        intake: Intake,
        followups: FollowUpIntake,
        budgets: Budgets | None = None,
    ) -> None:
        """`budgets`: the daily budgets a paused run must be within to resume (None: none)."""
        self._config = config
        self._budgets = budgets
        self._store = store
        self._storage = storage
        self._controls = controls
        self._intake = intake
        self._followups = followups

    def paused_by_signal(self) -> bool:
        """While the pause signal file exists, nothing is started or resumed."""
        return self._config.pause_resume.enabled and self._controls.signal_file.exists()

    def candidates(self, only: set[str] | None = None) -> list[str]:
        """Task keys with a run to continue: resumable paused runs (within their daily
        budgets), then orphaned tasks."""
        resumable = [] if self.paused_by_signal() else self._store.steering.resumable_runs()
        keys = [run.task_key for run in resumable if self._may_continue(run)]
        keys += self._store.runs.orphaned_tasks()
        unique = list(dict.fromkeys(keys))
        return [key for key in unique if only is None or key in only]

    def _may_continue(self, run: RunRecord) -> bool:
        """A paused run over a daily budget waits for the day to turn or the limit to be
        raised; one an operator stopped meanwhile is continued to publish the stop."""
        if self._budgets is None or self._budgets.overrun(run.task_key, run.requester, starting=False) is None:
            return True
        return self._store.steering.control_request(run.task_key) == "stop"

    async def try_take(self, source: Source, key: str) -> Claim | None:
        """Claim `key`'s run to continue it, or None when it is not ours to take (now).

        Only a key the producer would offer itself (`candidates`): a `continue` message is
        a hint, and a task labelled `processing` by hand has no run of the agent behind it."""
        if key not in await asyncio.to_thread(self.candidates, {key}):
            log.info("%s: no run to continue (no paused run, no stopped worker's); dropped", key)
            return None
        owner = self._controls.owner
        if not await asyncio.to_thread(self._store.leases.acquire_lease, key, owner, self._config.scheduling.lease_seconds):
            return None
        try:
            taken = await self._take(source, key)
        except BaseException:
            await asyncio.to_thread(self._store.leases.release_lease, key, owner)
            raise
        if taken is None:
            await asyncio.to_thread(self._store.leases.release_lease, key, owner)
        return taken

    async def _take(self, source: Source, key: str, look_again: bool = True) -> Claim | None:
        owner = self._controls.owner
        run = await asyncio.to_thread(self._store.runs.latest_run, key)
        await self._close_stale(key, run)
        if run is not None and run.status == "paused":
            marks = await asyncio.to_thread(self._store.steering.run_marks, run.uuid)
            if marks.resume_hold or self.paused_by_signal():
                return None
            if not await asyncio.to_thread(self._store.runs.claim_run, run.uuid, owner, "paused"):
                return None
            log.info("%s: resuming paused run %s", key, run.uuid)
            return await self._continue(source, run, marks)
        if run is not None and run.status == "running":
            if not await asyncio.to_thread(self._store.runs.claim_run, run.uuid, owner, "running"):
                # Its own worker closed it meanwhile, having found its lease taken (by this
                # worker): what is left of the task is read again, once.
                return await self._take(source, key, look_again=False) if look_again else None
            ended = self._storage.ended_status(run.uuid)
            if ended is not None:  # its end is out; its worker died before the store had it
                log.warning("%s: run %s had ended %s when its worker stopped; recorded", key, run.uuid, ended)
                await asyncio.to_thread(self._store.runs.finish_run, run.uuid, ended, run.steps, None)
                return None
            log.warning("%s: the worker of run %s stopped; taking it over", key, run.uuid)
            return await self._continue(source, run, await asyncio.to_thread(self._store.steering.run_marks, run.uuid))
        return await self._start_afresh(source, key)

    async def _close_stale(self, key: str, latest: RunRecord | None) -> None:
        """Close the task's unfinished runs older than its newest one: a paused run a newer
        run (re-triggered) superseded, and a `running` one whose worker lost the lease
        while a newer run began under it (a stalled worker) and died before it noticed.
        Only the newest run may go on: this worker holds the lease now."""
        if latest is None:
            return
        for status, reason in (
            ("paused", "superseded by a newer run of the task"),
            ("running", "its worker lost the task's lease to a newer run of the task"),
        ):
            for stale in await asyncio.to_thread(self._store.runs.runs_with_status, status, key):
                if stale.uuid != latest.uuid:
                    await asyncio.to_thread(self._store.runs.finish_run, stale.uuid, "abandoned", stale.steps, reason)

    async def _start_afresh(self, source: Source, key: str) -> Claim | None:
        """No unfinished run: a worker died between claiming the task and starting its run."""
        task = await source.get_task(TaskKey.parse(key))
        if task.state != "open":
            return None
        if not task.has_label(source.labels.processing_label):
            # It died before the claim's label swap, so the task is as new if it still
            # carries the trigger label (the producer, offering each key once, queued it
            # only as this run to continue): claimed as new, trust read afresh, under the
            # lease taken here, from the read just made.
            labelled = task.has_label(source.labels.bot_label)
            requester = await source.find_trigger_user(task.key) if labelled else None
            return await self._intake.claim_leased(source, task, requester)
        if task.has_label(source.labels.bot_label):  # the claim's label swap was cut short
            await source.remove_label(task.key, source.labels.bot_label)
        followup = await self._followups.claim_cut_short(source, task)
        if followup is not None:
            return followup
        log.warning("%s: claimed by a worker that stopped before its run began; starting it", key)
        return Takeover(task, await source.find_trigger_user(task.key), None)

    async def _continue(self, source: Source, run: RunRecord, marks: RunMarks) -> Takeover | None:
        task = await source.get_task(TaskKey.parse(run.task_key))
        directory = self._storage.find_run(run.uuid)
        state = load_state(directory) if directory is not None else None
        if task.state != "open":
            log.info("%s: closed meanwhile; run %s is not continued", run.task_key, run.uuid)
            await self._abandon(source, task, run, marks)
            return None
        labels = source.labels
        if not task.has_label(labels.processing_label) or task.has_label(labels.paused_label):
            await transition(source, task.key, labels.processing_label, [labels.paused_label])
        if directory is not None and (state is not None or marks.final_status is not None):
            # This machine's place for the run's clone: the state names none (a pause's
            # work is a commit on the task's branch, restored from there if needed).
            workspace = self._default_workspace(run.uuid)
            return Takeover(task, run.requester, Continuation(run, state, marks, workspace))
        log.warning("%s: run %s left no state to continue from; restarting the task", run.task_key, run.uuid)
        await self._abandon(source, task, run, marks)
        return Takeover(task, run.requester, None)

    def _default_workspace(self, run_uuid: str) -> Path:
        return Path(self._config.workspace.base_dir).resolve() / run_uuid

    async def _abandon(self, source: Source, task: Task, run: RunRecord, marks: RunMarks) -> None:
        """Close a run that cannot be continued: its record, its context, its progress comment."""
        reason = "its worker stopped and left nothing to continue from"
        await asyncio.to_thread(self._store.runs.finish_run, run.uuid, "abandoned", run.steps, reason)
        files = self._storage.reopen(run.uuid)
        if files is not None:
            files.write_metadata(status="abandoned")
            files.move_to("completed")
        if marks.progress_comment_id is not None and self._config.progress_comment.enabled:
            progress = ProgressComment(
                source, task.key, self._controls.redactor, self._config.language, run.uuid, 0
            )
            progress.comment_id = marks.progress_comment_id
            progress.note_steps(run.steps)
            await progress.finish("abandoned")

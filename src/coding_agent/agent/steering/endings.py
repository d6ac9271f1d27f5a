"""The two endings that are not done/failed (SPEC 8.2, 8.3): publishing a pause or a stop.

A pause saves everything, says so on the task with the resume hint, labels it paused and
leaves the context in `paused/`; a stop posts the stop notice as the final comment,
labels the task stopped and finishes the run. Either way the lease is released. A lost
lease publishes nothing: another worker has the task now.
"""

from __future__ import annotations

import logging
from datetime import datetime, timezone
from pathlib import Path

from coding_agent.agent.steering.final import FinalComment, IssueWriter
from coding_agent.agent.steering.saving import RunSaver
from coding_agent.agent.steering.scope import RunScope
from coding_agent.agent.steering.signals import RunInterrupted, RunPaused, RunStopped
from coding_agent.errors import AgentError
from coding_agent.llm.base import LLMClient
from coding_agent.prompts.notices import notice
from coding_agent.sources.lifecycle import transition

__all__ = ["Endings"]

log = logging.getLogger(__name__)


def _now_iso() -> str:
    return datetime.now(timezone.utc).replace(microsecond=0).isoformat()


class Endings:
    def __init__(self, scope: RunScope, saver: RunSaver, final: FinalComment, inner: IssueWriter) -> None:
        self._scope = scope
        self._saver = saver
        self._final = final
        self._inner = inner

    async def publish(self, error: RunInterrupted, llm: LLMClient | None) -> tuple[str, Path]:
        """Publish a pause or a stop; returns (run status, context directory)."""
        scope = self._scope
        if isinstance(error, RunPaused) and llm is not None:
            return await self._pause(error, llm)
        if isinstance(error, RunStopped):
            return await self._stop(error)
        # LeaseLost: another worker has this task (and maybe this very run) now.
        log.warning("%s: run %s gave the task up (%s)", scope.key, scope.run_uuid, error)
        if scope.progress is not None:
            await scope.progress.discard()
        return "abandoned", scope.files.directory

    async def _pause(self, error: RunPaused, llm: LLMClient) -> tuple[str, Path]:
        scope = self._scope
        language = scope.config.language
        at = _now_iso()
        work = await scope.save_work()  # the WIP commit on the task's branch, for any machine
        self._saver.save_paused(llm, {"reason": error.reason, "hold": error.hold, "at": at}, work)
        await scope.stored(scope.store.pause_run, scope.run_uuid, scope.steps, error.hold)
        if error.reason == "operator":
            await scope.stored(scope.store.clear_control_request, scope.key)
        resume = notice("resume_manual", language, key=scope.key) if error.hold else notice("resume_auto", language)
        text = error.comment or notice(
            "paused",
            language,
            reason=notice(f"pause_reason_{error.reason}", language),
            time=at,
            turns=scope.steps,
            resume=resume,
        )
        if work is not None and work.pushed and work.commit:
            text += "\n\n" + notice("paused_work", language, branch=work.branch, commit=work.commit[:12])
        labels = scope.source.labels
        try:
            if scope.progress is not None:
                await scope.progress.finish("paused")
            await scope.source.post_comment(scope.task.key, scope.redactor.text(text))
            await transition(scope.source, scope.task.key, labels.paused_label, [labels.processing_label])
        except AgentError as failure:
            log.error("%s: could not publish the pause: %s", scope.key, scope.redactor.text(str(failure)))
        scope.files.write_metadata(status="paused", steps=scope.steps)
        directory = scope.files.move_to("paused")
        await scope.stored(scope.store.release_lease, scope.key, scope.controls.owner)
        log.info("%s: run %s paused (%s) after %d steps", scope.key, scope.run_uuid, error.reason, scope.steps)
        return "paused", directory

    async def _stop(self, error: RunStopped) -> tuple[str, Path]:
        scope = self._scope
        language = scope.config.language
        marks = await scope.stored(scope.store.run_marks, scope.run_uuid)
        labels = scope.source.labels
        if marks.final_status == "stopped" and marks.final_body:
            text = marks.final_body
        else:
            text = notice(
                "stopped",
                language,
                reason=notice(f"stop_reason_{error.reason}", language),
                time=_now_iso(),
                turns=scope.steps,
                label=labels.bot_label,
            )
            position = scope.describe_position()
            text = f"{text}\n\n{position}" if position else text
            await scope.stored(scope.store.record_final, scope.run_uuid, "stopped", text)
        try:
            await self._final.post(text, self._inner)
            if scope.progress is not None:
                await scope.progress.finish("stopped")
            await transition(scope.source, scope.task.key, labels.stopped_label, [labels.processing_label])
        except AgentError as failure:
            log.error("%s: could not publish the stop: %s", scope.key, scope.redactor.text(str(failure)))
        if error.reason == "operator":
            await scope.stored(scope.store.clear_control_request, scope.key)
        scope.files.write_metadata(status="stopped", steps=scope.steps)
        directory = scope.files.move_to("completed")
        await scope.stored(scope.store.finish_run, scope.run_uuid, "stopped", scope.steps, None)
        await scope.stored(scope.store.release_lease, scope.key, scope.controls.owner)
        log.info("%s: run %s stopped (%s) after %d steps", scope.key, scope.run_uuid, error.reason, scope.steps)
        return "stopped", directory

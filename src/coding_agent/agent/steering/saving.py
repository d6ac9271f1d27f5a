"""Saving a run's state: the crash checkpoint of every iteration, and the pause's full save.

One job: turn the run as it stands (history, usage, steering's and the progress comment's
own state, the loop guard's counts) into a `RunState` and hand it to the `StateWriter`. What a takeover or a
resume continues from is exactly what this writes.
"""

from __future__ import annotations

from typing import Any

from coding_agent.agent.loop_guard import LoopGuard
from coding_agent.agent.steering.comments import CommentDetector
from coding_agent.agent.steering.scope import RunScope
from coding_agent.agent.steering.state import RunState, StateWriter, workspace_branch
from coding_agent.agent.steering.stop import StopChecker
from coding_agent.domain.runs import PausedWork
from coding_agent.llm.base import LLMClient

__all__ = ["RunSaver"]


class RunSaver:
    def __init__(self, scope: RunScope, detector: CommentDetector, stop: StopChecker, guard: LoopGuard) -> None:
        self._scope = scope
        self._detector = detector
        self._stop = stop
        self._guard = guard
        # The saved history is the run's current.jsonl: no copy of its own.
        self._writer = StateWriter(scope.redactor, scope.files)
        state = scope.continuation.state if scope.continuation is not None else None
        # The paused work the run stands on: a takeover after a crash restores from it too.
        self._work = PausedWork(state.branch, state.commit) if state is not None and state.branch and state.commit else None
        # The clone's branch, once read: only the host's git moves HEAD (checkout before the
        # loop, delivery after it; the sandbox has no git dir), and reading it from disk at
        # every crash checkpoint was a file read a step.
        self._branch: str | None = None

    def checkpoint(self, llm: LLMClient) -> None:
        """The crash checkpoint, at the start of an iteration (history appended, not rewritten)."""
        self._writer.checkpoint(self._scope.files.directory, self.snapshot(llm))

    def save_paused(self, llm: LLMClient, paused: dict[str, Any], work: PausedWork | None) -> None:
        """The pause's save: one self-contained file, history included (SPEC 8.3); `work`:
        the WIP commit the pause pushed (None: no clone, or it could not be committed)."""
        if work is not None:
            self._work = work
        self._writer.save_complete(self._scope.files.directory, self.snapshot(llm, paused))

    def _clone_branch(self) -> str | None:
        if self._branch is None:
            self._branch = workspace_branch(self._scope.workspace)
        return self._branch

    def snapshot(self, llm: LLMClient, paused: dict[str, Any] | None = None) -> RunState:
        scope = self._scope
        return RunState(
            run_uuid=scope.run_uuid,
            task_key=scope.key,
            requester=scope.requester,
            branch=self._work.branch if self._work is not None else self._clone_branch() or scope.task.head_branch,
            commit=self._work.commit if self._work is not None else None,
            steps=scope.steps,
            messages=llm.messages,
            prompt_tokens=llm.usage.prompt_tokens,
            completion_tokens=llm.usage.completion_tokens,
            steering={
                "comments": self._detector.get_state(),
                "stop": self._stop.get_state(),
                "loop_guard": self._guard.get_state(),
            },
            progress=scope.progress.get_state() if scope.progress is not None else {},
            paused=paused,
            planning=scope.planning_state(),
        )

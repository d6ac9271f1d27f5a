"""The steering checkpoint (SPEC 8): one call, one `Decision`.

In this order: pause? (signal file, operator request, shutdown), stop? (operator request,
bot unassigned), then, at the start of an iteration, a daily budget's pause (SPEC 11.5)
and the crash checkpoint, then new comments (as one user message for the loop to
append). The parts that answer each question live in their own modules; this one only
asks them in order and says what the loop should do.

The crash checkpoint is written before the comment check, so a saved state never holds
comments the saved history has not seen: a worker that takes the run over detects them
again and sends them once.
"""

from __future__ import annotations

from coding_agent.agent.loop import CONTINUE, Checkpoint, Decision, Verdict
from coding_agent.agent.steering.comments import CommentDetector
from coding_agent.agent.steering.pause import PauseWatch
from coding_agent.agent.steering.saving import RunSaver
from coding_agent.agent.steering.scope import RunScope
from coding_agent.agent.steering.signals import RunPaused, RunStopped
from coding_agent.agent.steering.stop import StopChecker
from coding_agent.llm.base import LLMClient
from coding_agent.llm.protocols import DONE_TOOL

__all__ = ["Checkpointer"]


class Checkpointer:
    def __init__(
        self, scope: RunScope, pause: PauseWatch, stop: StopChecker, detector: CommentDetector, saver: RunSaver
    ) -> None:
        self._scope = scope
        self._pause = pause
        self._stop = stop
        self._detector = detector
        self._saver = saver
        # Seeded so that the first checkpoint, whichever it is, asks the forge (None: the
        # run's start has just asked, see `start_read_the_conversation`).
        self._previous_point: Checkpoint | None = Checkpoint.ITERATION_START

    def start_read_the_conversation(self) -> None:
        """A new run's start has just listed the comments its first prompt is built from:
        its first iteration starts right after that, and the forge is not asked the same
        again. Its first stop check comes with the first reply, before any tool runs."""
        self._previous_point = None

    async def decide(self, point: Checkpoint, llm: LLMClient) -> Decision:
        request = await self._pause.operator_request()
        paused = self._pause.pause_for(request)
        if paused is not None:
            return Decision(Verdict.PAUSE, ending=paused)
        if request == "stop":
            return Decision(Verdict.STOP, ending=RunStopped("operator"))
        budget = self._scope.controls.budget
        if budget is not None and point is Checkpoint.ITERATION_START:  # the step before is done
            comment = await self._scope.stored(budget, self._scope.key, self._scope.requester)
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
            steps = self._scope.steps
            iteration = steps + 1 if point is Checkpoint.ITERATION_START else steps
            if await self._stop.bot_unassigned(iteration):
                return Decision(Verdict.STOP, ending=RunStopped("unassigned"))
        if point is Checkpoint.ITERATION_START:
            self._saver.checkpoint(llm)
        if asked_just_now or not _takes_user_message(llm):
            return CONTINUE
        message = await self._detector.message(await self._detector.check())
        return Decision(messages=(message,)) if message is not None else CONTINUE


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

"""Publishing a run's outcome: the final comment and the done or failed label.

A final comment the forge refuses for good is replaced by a failure notice; anything
else that fails leaves the outcome to publish again (the runner keeps the run
`finishing`), and after the last attempt `give_up` ends the task failed as far as the
forge lets it.
"""

from __future__ import annotations

import logging

from coding_agent.agent.loop import LoopOutcome
from coding_agent.agent.steering.endings import IssueWriter
from coding_agent.domain.tasks import Task
from coding_agent.errors import AgentError, ForgeError
from coding_agent.prompts.notices import Language, notice
from coding_agent.redaction import Redactor
from coding_agent.sources.base import Source
from coding_agent.sources.lifecycle import transition

__all__ = ["publish_outcome", "give_up"]

log = logging.getLogger(__name__)


async def publish_outcome(
    source: Source, task: Task, reporter: IssueWriter, outcome: LoopOutcome, language: Language, redactor: Redactor
) -> tuple[str | None, str]:
    """Final comment and label: the run status, or None and why when the forge failed us.

    A final comment the forge refuses for good (a 4xx: it will refuse it again) is
    replaced by a failure notice that says why. Anything else that fails (5xx
    streaks, timeouts, a forbidden label write) leaves the outcome to publish again.
    """
    labels = source.labels
    if outcome.status == "done":
        comment, label = outcome.comment.strip() or "Done.", labels.done_label
    else:
        comment, label = notice("failed", language, reason=outcome.comment, label=labels.failed_label), labels.failed_label
    status = outcome.status
    try:
        try:
            await reporter.final_comment(comment)
        except ForgeError as refused:  # a 4xx (TransientError is not a ForgeError)
            reason = redactor.text(f"the forge refused the final comment: {refused}")
            log.error("%s: %s", task.key, reason)
            await reporter.final_comment(notice("failed", language, reason=reason, label=labels.failed_label))
            status, label = "failed", labels.failed_label
        await transition(source, task.key, label, [labels.processing_label])
    except AgentError as error:
        failure = redactor.text(str(error))
        log.error("%s: could not publish the outcome (%s): %s", task.key, status, failure)
        return None, failure
    return status, ""


async def give_up(source: Source, task: Task, attempts: int, failure: str, language: Language, redactor: Redactor) -> str:
    """After `attempts` failed publications: a failure comment and label, as far as the forge lets us."""
    labels = source.labels
    reason = f"the forge refused the run's outcome {attempts} times (last: {failure})"
    log.error("%s: %s; the run ends failed", task.key, reason)
    text = notice("failed", language, reason=reason, label=labels.failed_label)
    for write in (
        lambda: source.post_comment(task.key, redactor.text(text)),
        lambda: transition(source, task.key, labels.failed_label, [labels.processing_label]),
    ):
        try:
            await write()
        except AgentError as error:
            log.error("%s: %s", task.key, redactor.text(str(error)))
    return "failed"

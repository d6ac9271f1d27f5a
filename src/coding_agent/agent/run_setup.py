"""What a run starts with, from the configuration: planning mode's policy (restored for
a continued run) and the first user turn (the task, its conversation and threads, the
memories)."""

from __future__ import annotations

from pathlib import Path

from coding_agent.agent.markdown import inert_markdown
from coding_agent.agent.planning import PlanningPolicy, load_planning_state
from coding_agent.agent.steering import RunSteering
from coding_agent.agent.trust import Conversation
from coding_agent.config import AgentConfig
from coding_agent.context.first_turn import FirstTurnSettings, build_first_turn
from coding_agent.context.memory import MemoryKeeper
from coding_agent.domain.ci import CiFix
from coding_agent.domain.runs import RunRecord
from coding_agent.domain.tasks import Task
from coding_agent.llm.protocols import ReplyProtocol
from coding_agent.prompts.prompting import text
from coding_agent.prompts.untrusted import UntrustedWrapper, neutralise_tags
from coding_agent.redaction import Redactor
from coding_agent.sources.base import Source

__all__ = ["planner_for", "first_turn_for", "ci_fix_turn"]


def planner_for(
    config: AgentConfig, protocol: ReplyProtocol, workspace: Path, steering: RunSteering, redactor: Redactor
) -> PlanningPolicy | None:
    """Planning mode's policy (SPEC 10), its state restored for a continued run. Its
    checklist shows the model's words redacted, then inert (escaping could hide a secret).
    `steering` saves its state and names its position in a stop comment."""
    if not config.planning.enabled:
        return None
    saved = steering.saved_planning()
    state = load_planning_state(saved) if steering.continued else None
    planner = PlanningPolicy(
        config.planning,
        protocol,
        workspace,
        steering.progress,
        steering.reporter().step_comment,
        lambda: steering.steps,
        state,
        git_timeout=config.workspace.git_timeout_seconds,
        shown=lambda text: inert_markdown(redactor.text(text)),
    )
    steering.plan_with(planner)
    return planner


def first_turn_for(
    config: AgentConfig,
    memories: MemoryKeeper | None,
    source: Source,
    task: Task,
    conversation: Conversation,
    run_uuid: str,
    branch_rules: dict[str, str],
    runs: list[RunRecord],
) -> str:
    """The task, its conversation and review threads, and the memories (SPEC 9.1, 9.2)."""
    handling = config.comment_handling
    settings = FirstTurnSettings(
        bot_name=source.bot_name,
        max_comment_count=handling.max_comment_count,
        completion_keywords=tuple(handling.completion_keywords),
        channel_messages_limit=config.memory.channel_messages_limit,
        persona=config.persona,
        wrapper=conversation.trust.wrapper,
    )
    # A task whose previous run ended done is worked again: a follow-up (SPEC 3).
    previous = [run for run in runs if run.uuid != run_uuid]
    followup = bool(previous) and previous[-1].status == "done"
    recalled = memories.recall(task.key) if memories is not None else None
    return build_first_turn(
        task, conversation.comments, conversation.threads, conversation.trust, settings, recalled, followup, branch_rules
    )


def ci_fix_turn(fix: CiFix | None, wrapper: UntrustedWrapper, lines: int) -> str:
    """A CI fix run's part of the first turn (SPEC 16): each failing check with its log's
    tail inside the run's untrusted-content block (the log is the branch's code's output,
    SPEC 15), and what the fix may and may not do. Empty for any other run. A check's name
    and conclusion come from the CI's configuration on the branch too: kept short, and
    unable to close the block."""
    if fix is None:
        return ""
    checks = [
        {
            "name": neutralise_tags(" ".join(failing.check.name.split())[:200]),
            "conclusion": neutralise_tags(" ".join(failing.check.conclusion.split())[:50]),
            "url": neutralise_tags(" ".join(failing.check.url.split())[:500]) if failing.check.url else None,
            "log": wrapper.wrap("ci-log", failing.log_tail) if failing.log_tail and failing.log_tail.strip() else None,
        }
        for failing in fix.failing
    ]
    return text(
        "ci_fix.j2",
        sha=fix.sha,
        branch=fix.branch,
        attempt=fix.attempt,
        max_attempts=fix.max_attempts,
        checks=checks,
        lines=lines,
    )

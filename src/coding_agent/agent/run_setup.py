"""What a run starts with, from the configuration: planning mode's policy (restored for
a continued run) and the first user turn (the task, its conversation and threads, the
memories)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from coding_agent.agent.markdown import inert_markdown
from coding_agent.agent.planning import PlanningPolicy, load_planning_state
from coding_agent.agent.steering import RunSteering
from coding_agent.agent.trust import Conversation
from coding_agent.config import AgentConfig
from coding_agent.context.first_turn import FirstTurn, FirstTurnSettings, compose_first_turn
from coding_agent.context.memory import MemoryKeeper
from coding_agent.domain.ci import CiFix, FailingCheck
from coding_agent.domain.runs import RunRecord
from coding_agent.domain.tasks import Task
from coding_agent.llm.protocols import ReplyProtocol
from coding_agent.prompts.prompting import text
from coding_agent.prompts.untrusted import UntrustedWrapper, neutralise_tags
from coding_agent.redaction import Redactor
from coding_agent.sources.base import Source

__all__ = ["planner_for", "first_turn_for", "ci_fix_turn", "fair_shares"]


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
) -> FirstTurn:
    """The task, its conversation and review threads, and the memories (SPEC 9.1, 9.2);
    with the comments the conversation shows, for the run to record."""
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
    return compose_first_turn(
        task, conversation.comments, conversation.threads, conversation.trust, settings, recalled, followup, branch_rules
    )


def ci_fix_turn(fix: CiFix | None, wrapper: UntrustedWrapper, lines: int, max_chars: int) -> str:
    """A CI fix run's part of the first turn (SPEC 16): each failing check in the run's
    untrusted-content block, and what the fix may and may not do. Empty for any other run.

    Everything a check is told by comes from the CI the branch's own code configures and
    runs (SPEC 15 "Speak through CI"): its name, conclusion and URL as much as its log. So
    all of it sits inside the block, never in the host's words around it, and all of it
    together stays within `max_chars` (`ci.max_prompt_chars`) however many checks failed:
    names are kept to one short line, and the logs' tails share what is left fairly,
    each cut from its start (the end of a log is where a failure shows), with the cut said.
    """
    if fix is None:
        return ""
    entries, unlisted = _fit_ci_text(fix.failing, max_chars)
    checks = [
        {
            "block": wrapper.wrap("ci", entry.content),
            "has_log": entry.log_chars > 0,
            "kept": entry.log_chars,
            "cut": entry.cut,
        }
        for entry in entries
    ]
    return text(
        "ci_fix.j2",
        sha=fix.sha,
        branch=fix.branch,
        attempt=fix.attempt,
        max_attempts=fix.max_attempts,
        checks=checks,
        failing=len(fix.failing),
        unlisted=unlisted,
        lines=lines,
        max_chars=max_chars,
    )


# One line each for what names a check; its log gets what the cap leaves.
_NAME_CHARS, _CONCLUSION_CHARS, _URL_CHARS = 200, 50, 500
_LOG_LABEL = "\nlog:\n"


@dataclass(frozen=True)
class _CiEntry:
    """One failing check as the block holds it: `content` (its head and log), the log's
    characters kept and cut."""

    content: str
    log_chars: int
    cut: int


def _one_line(value: str, limit: int) -> str:
    return neutralise_tags(" ".join(value.split())[:limit])


def _fit_ci_text(failing: tuple[FailingCheck, ...], max_chars: int) -> tuple[list[_CiEntry], int]:
    """The failing checks' text within `max_chars` in all, and how many checks were left
    out: the heads (name, conclusion, URL) take at most half the cap, in order, so a
    flood of failing checks still leaves room for logs; the logs share the rest."""
    heads: list[str] = []
    used = 0
    for item in failing:
        check = item.check
        head = f"check: {_one_line(check.name, _NAME_CHARS)}\nconclusion: {_one_line(check.conclusion, _CONCLUSION_CHARS)}"
        if check.url:
            head += f"\nURL: {_one_line(check.url, _URL_CHARS)}"
        if heads and used + len(head) > max_chars // 2:
            break
        heads.append(head)
        used += len(head)
    listed = failing[: len(heads)]
    # Neutralised before measuring, so the block holds exactly what was counted.
    logs = [neutralise_tags(item.log_tail) if item.log_tail and item.log_tail.strip() else "" for item in listed]
    overhead = used + sum(len(_LOG_LABEL) for log in logs if log)
    shares = fair_shares([len(log) for log in logs], max(max_chars - overhead, 0))
    entries = []
    for head, log, share in zip(heads, logs, shares):
        kept = log[len(log) - share :] if share else ""
        entries.append(_CiEntry(head + (_LOG_LABEL + kept if kept else ""), len(kept), len(log) - len(kept)))
    return entries, len(failing) - len(listed)


def fair_shares(sizes: list[int], budget: int) -> list[int]:
    """How much of each of `sizes` fits in `budget` shared fairly: what is smaller than
    an even share is kept whole, and what it leaves is shared by the rest (max-min fair)."""
    shares = [0] * len(sizes)
    left = budget
    order = sorted(range(len(sizes)), key=lambda index: sizes[index])
    for position, index in enumerate(order):
        shares[index] = min(sizes[index], left // (len(order) - position))
        left -= shares[index]
    return shares

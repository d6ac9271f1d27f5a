"""Follow-ups from review threads (SPEC 3): the parts that say which PR/MR, which thread,
which comment.

A task the agent finished may have a PR/MR the agent opened (its head branch is the
task branch `coding-agent/<number>-...`, pushed to the issue's own repository). A trusted
@mention of the bot in one of its review threads (GitHub review comments and their
replies) or MR discussions (GitLab) asks for more on that same task: the follow-up run
is a run of the issue, it pushes to the same branch (so the PR/MR is updated, never a
second one opened), and its answer goes into that thread (`ThreadRef`).

The claim itself (lease, records, trust, acknowledgement) is `FollowUpIntake`'s, as for
issue comments; this module only holds what is particular to threads.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from coding_agent.domain.tasks import Task, TaskKey, TaskKind, ThreadRef
from coding_agent.runtime.intake import Claim
from coding_agent.workspace.checkout import BRANCH_PREFIX

__all__ = ["ReviewClaim", "agents_issue"]

_TASK_BRANCH = re.compile(rf"^{re.escape(BRANCH_PREFIX)}(?P<number>[1-9][0-9]*)-")


@dataclass(frozen=True)
class ReviewClaim(Claim):
    """A follow-up claimed from a review thread: the run answers in `reply_to`."""

    reply_to: ThreadRef | None = None


def agents_issue(change: Task, bot_name: str) -> TaskKey | None:
    """The issue the agent opened `change` for, or None when `change` is not such a PR/MR.

    Such a PR/MR is the bot's own, and its head is a task branch of the same repository
    (a fork's branch of the same name is someone else's).
    """
    if not change.key.is_change or change.author.lower() != bot_name.lower():
        return None
    match = _TASK_BRANCH.match(change.head_branch or "")
    head_repo = change.extra.get("head_repo", change.key.project)
    if match is None or head_repo.lower() != change.key.project.lower():
        return None
    return TaskKey(change.key.forge, change.key.project, TaskKind.ISSUE, int(match["number"]))


"""Whose words a run trusts: comment authors with write access (SPEC 3, 15).

Looked up once per author per run (the claim of the run has looked up its requester
already: see `TrustCache`); the text of everyone else reaches the model inside the run's
untrusted-content wrapper (one nonce per run). `read_conversation` reads a task's
comments and review threads with whose words among them are trusted.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from dataclasses import dataclass

from coding_agent.domain.tasks import Comment, Permission, Task, TaskKey, Thread, ThreadRef
from coding_agent.errors import AgentError
from coding_agent.prompts.untrusted import UntrustedWrapper
from coding_agent.sources.base import Source

__all__ = ["TrustCache", "Conversation", "read_conversation", "head_is_trusted"]

log = logging.getLogger(__name__)


class TrustCache:
    """Which comment authors have write access (looked up once per author per run), and
    the run's wrapper (one nonce per run) for the text of those who do not."""

    def __init__(self, writers: Iterable[str] = ()) -> None:
        """`writers`: whom the claim of this same run found to have write access, moments
        before the run started; they are not asked again. One cache per run, never shared:
        a run trusts no answer older than its own start."""
        self.trusted: dict[str, bool] = dict.fromkeys(writers, True)
        self.wrapper = UntrustedWrapper.new()

    async def load(self, source: Source, key: TaskKey, authors: set[str]) -> None:
        for author in sorted(authors - self.trusted.keys()):
            if source.bot_name and author == source.bot_name:
                self.trusted[author] = True
                continue
            try:
                permission = await source.get_permission(key, author)
            except AgentError as error:
                log.warning("%s: permission of %s unknown (%s); treated as untrusted", key, author, error)
                permission = Permission.NONE
            self.trusted[author] = permission.can_write

    def __call__(self, author: str) -> bool:
        return self.trusted.get(author, False)


@dataclass(frozen=True)
class Conversation:
    """A task's comments and review threads, and whose words among them are trusted."""

    comments: list[Comment]
    threads: list[Thread]
    trust: TrustCache


async def read_conversation(
    source: Source, task: Task, reply_to: ThreadRef | None, writers: Iterable[str]
) -> Conversation:
    """The task's comments and review threads (`reply_to`: a thread of the agent's PR/MR
    that asked for the run, read as context too), and whose words are trusted (`writers`:
    whom the claim found to have write access)."""
    comments = await source.list_comments(task.key)
    threads = await source.list_threads(task.key) if task.key.is_change else []
    if reply_to is not None and reply_to.change != task.key:  # a PR/MR task's own threads are read above
        threads += [t for t in await source.list_threads(reply_to.change) if t.id == reply_to.thread_id]
    trust = TrustCache(writers)
    authors = {task.author} | {c.author for c in comments} | {c.author for t in threads for c in t.comments}
    await trust.load(source, task.key, authors)
    return Conversation(comments, threads, trust)


async def head_is_trusted(source: Source, task: Task, writers: Iterable[str] = ()) -> bool:
    """Whether the run's clone holds a tree only people with write access wrote (SPEC 15).

    An issue's clone is the default branch or the agent's own branch in the repository.
    A PR/MR head is trusted when it lives in the repository itself, where only people
    with write access push (not a fork, which its owner controls), and its author has
    write access too. `writers`: who the claim found to have write access (not asked
    again). A forge error counts as untrusted.
    """
    if not task.key.is_change:
        return True
    if task.key.forge == "github":
        same_repository = task.extra.get("head_repo", "").lower() == task.key.project.lower()
    else:
        source_project = task.extra.get("source_project_id", "")
        same_repository = bool(source_project) and source_project == task.extra.get("project_id")
    if not same_repository or not task.author:
        return False
    if task.author in writers:
        return True
    try:
        return (await source.get_permission(task.key, task.author)).can_write
    except AgentError as error:
        log.warning("%s: permission of %s unknown (%s); its head is treated as untrusted", task.key, task.author, error)
        return False

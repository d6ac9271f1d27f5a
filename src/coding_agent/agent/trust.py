"""Whose words a run trusts: comment authors with write access (SPEC 3, 15).

Looked up once per author per run (the claim of the run has looked up its requester
already: see `TrustCache`); the text of everyone else reaches the model inside the run's
untrusted-content wrapper (one nonce per run).
"""

from __future__ import annotations

import logging
from collections.abc import Iterable

from coding_agent.domain.tasks import Permission, Task, TaskKey
from coding_agent.errors import AgentError
from coding_agent.prompts.untrusted import UntrustedWrapper
from coding_agent.sources.base import Source

__all__ = ["TrustCache", "head_is_trusted"]

# The runner's logger: these lines read as the run's, as before they moved here.
log = logging.getLogger("coding_agent.agent.runner")


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

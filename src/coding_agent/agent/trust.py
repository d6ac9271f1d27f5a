"""Whose words a run trusts: comment authors with write access (SPEC 3, 15).

Looked up once per author per run (the claim of the run has looked up its requester
already: see `TrustCache`); the text of everyone else reaches the model inside the run's
untrusted-content wrapper (one nonce per run).
"""

from __future__ import annotations

import logging
from collections.abc import Iterable

from coding_agent.domain.tasks import Permission, TaskKey
from coding_agent.errors import AgentError
from coding_agent.prompts.untrusted import UntrustedWrapper
from coding_agent.sources.base import Source

__all__ = ["TrustCache"]

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

"""The in-memory world of the GitLab-compatible testing server.

Tests seed it and inspect it from Python while the server answers python-gitlab over
real HTTP, so every write goes through one lock and every reader hands back a copy:
a test can never observe (or cause) a half-applied update. The world is one object
composed of its parts, one module each on the shared tables of `tables.py`.
"""

from __future__ import annotations

from tests.support.gitlab.ci import Ci
from tests.support.gitlab.issues import Issues
from tests.support.gitlab.readers import Readers
from tests.support.gitlab.traffic import Traffic

__all__ = ["GitLabState"]


class GitLabState(Issues, Readers, Traffic, Ci):
    """Users, groups, projects, issues, MRs, notes, discussions, labels, pipelines and
    jobs (ci.py, with the webhooks they send) and the request log.

    Every public method takes the lock; `lock` is public so the HTTP layer can read a
    consistent picture while it serialises a response. Methods that name an issue or MR
    take `kind="issue"` or `kind="mr"`.
    """

    def __init__(self) -> None:
        super().__init__()
        self.add_user("root", name="Administrator")

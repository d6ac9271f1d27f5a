"""What delivery talks about: people as git sees them, and the PR/MR a run delivers into.

No I/O here: the sources build these from API answers and the workspace package reads them.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

__all__ = ["GitIdentity", "ChangeRequest", "PushedHead"]


@dataclass(frozen=True)
class GitIdentity:
    """A forge user as a commit names them: `Name <email>`.

    When the forge does not publish an email, the adapter uses the forge's no-reply
    address, which still links the commit to the account.
    """

    name: str
    email: str

    def __post_init__(self) -> None:
        for value in (self.name, self.email):
            if not value or any(char in value for char in "<>\n"):
                raise ValueError(f"not usable in a commit identity: {value!r}")

    def __str__(self) -> str:
        return f"{self.name} <{self.email}>"

    @classmethod
    def from_profile(cls, name: str, email: str, fallback_name: str) -> GitIdentity:
        """An identity from forge profile fields, dropping what a commit header cannot hold."""
        clean_name = re.sub(r"[<>\r\n]", "", name).strip() or fallback_name
        return cls(clean_name, re.sub(r"[<>\s]", "", email))


@dataclass(frozen=True)
class ChangeRequest:
    """An open pull request (GitHub) or merge request (GitLab) of a repository."""

    number: int
    url: str
    head_branch: str
    base_branch: str
    body: str
    draft: bool
    # The commit the head branch points at, as the forge last saw it: the CI watch
    # (SPEC 16) compares it with what the agent pushed to tell a human push.
    head_sha: str | None = None


@dataclass(frozen=True)
class PushedHead:
    """What a run's delivery pushed: commit `sha` at the head of PR/MR `number` of
    `project`, on `branch`. The CI watch (SPEC 16) watches it."""

    project: str
    number: int
    branch: str
    sha: str

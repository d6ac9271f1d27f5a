"""Immutable records the GitHub testing server keeps: users, repositories, issues, comments.

Records are frozen and replaced on change, so a reader (a test, the HTTP layer) can hold
one without copying and without seeing it change under it.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from datetime import datetime
from urllib.parse import parse_qsl

__all__ = [
    "PERMISSION_LEVELS",
    "UserRecord",
    "LabelRecord",
    "RepoRecord",
    "IssueRecord",
    "CommentRecord",
    "ReviewCommentRecord",
    "EventRecord",
    "RequestRecord",
    "RateLimitRecord",
    "AnnotationRecord",
    "CheckRunRecord",
    "WorkflowRunRecord",
    "StatusRecord",
    "ACTIONS_APP",
    "CiEvent",
]

# GitHub's repository roles, weakest first; the index orders them.
PERMISSION_LEVELS: tuple[str, ...] = ("read", "triage", "write", "maintain", "admin")


@dataclass(frozen=True)
class UserRecord:
    id: int
    login: str
    created_at: datetime
    bot: bool = False
    name: str | None = None
    email: str | None = None

    @property
    def type(self) -> str:
        return "Bot" if self.bot else "User"


@dataclass(frozen=True)
class LabelRecord:
    id: int
    name: str
    color: str = "ededed"
    description: str | None = None


@dataclass(frozen=True)
class RepoRecord:
    id: int
    owner: str
    name: str
    default_branch: str
    private: bool
    created_at: datetime
    description: str | None = None
    clone_url: str | None = None

    @property
    def full_name(self) -> str:
        return f"{self.owner}/{self.name}"


@dataclass(frozen=True)
class IssueRecord:
    """An issue or, with `is_pull`, a pull request: GitHub numbers both in one sequence."""

    id: int
    repo: str
    number: int
    title: str
    body: str
    author: str
    created_at: datetime
    updated_at: datetime
    labels: tuple[str, ...] = ()
    assignees: tuple[str, ...] = ()
    state: str = "open"
    closed_at: datetime | None = None
    is_pull: bool = False
    pull_id: int | None = None
    head: str | None = None
    head_owner: str | None = None
    base: str | None = None
    head_sha: str | None = None
    base_sha: str | None = None
    draft: bool = False
    merged: bool = False


@dataclass(frozen=True)
class CommentRecord:
    id: int
    repo: str
    number: int
    author: str
    body: str
    created_at: datetime
    updated_at: datetime


@dataclass(frozen=True)
class ReviewCommentRecord:
    """A PR review comment; `in_reply_to_id` points at the thread's root, as on GitHub."""

    id: int
    repo: str
    number: int
    author: str
    body: str
    path: str
    line: int | None
    created_at: datetime
    updated_at: datetime
    commit_id: str
    in_reply_to_id: int | None = None


@dataclass(frozen=True)
class EventRecord:
    """An issue event: `labeled`/`unlabeled` carry `label`, `assigned`/`unassigned` `assignee`."""

    id: int
    repo: str
    number: int
    event: str
    actor: str
    created_at: datetime
    label: str | None = None
    label_color: str | None = None
    assignee: str | None = None


@dataclass(frozen=True)
class RequestRecord:
    """One request as the server answered it; `not_modified` marks a 304."""

    method: str
    path: str
    query: str
    status: int
    login: str | None = None
    fault: bool = False
    answered_at: float = field(default_factory=time.monotonic, compare=False)  # for timelines
    client_port: int | None = field(default=None, compare=False)  # one per connection the client opened

    # Body bytes sent (the Content-Length answered): what a ranged read of a log cost.
    size: int | None = field(default=None, compare=False)

    @property
    def not_modified(self) -> bool:
        return self.status == 304

    @property
    def params(self) -> dict[str, str]:
        """The decoded query parameters (the last value of each)."""
        return dict(parse_qsl(self.query, keep_blank_values=True))

    @property
    def target(self) -> str:
        return f"{self.method} {self.path}"


@dataclass
class RateLimitRecord:
    """The primary rate limit of the sandbox: one bucket for every authenticated request."""

    limit: int = 5000
    remaining: int = 5000
    reset: int = 0
    used: int = field(default=0)


# The app slug of GitHub Actions' own check runs.
ACTIONS_APP = "github-actions"


@dataclass(frozen=True)
class AnnotationRecord:
    """A line a check run points at (`annotation_level`: notice, warning or failure)."""

    path: str
    start_line: int
    message: str
    annotation_level: str = "failure"
    end_line: int | None = None
    title: str | None = None


@dataclass(frozen=True)
class CheckRunRecord:
    """A check run of commit `head_sha`: an Actions job (`run_id` set, the job sharing the
    check run's id, `log` its log) or another app's check (`output_*`, `annotations`).

    `conclusion` None while it runs; `log` None when GitHub has none (expired: a 404);
    `rerun` is the conclusion a re-run ends with (None: the same as this time, same log).
    """

    id: int
    repo: str
    head_sha: str
    name: str
    app: str
    status: str
    conclusion: str | None
    started_at: datetime
    completed_at: datetime | None = None
    run_id: int | None = None
    run_attempt: int = 1
    log: bytes | None = b""
    rerun: str | None = None
    output_title: str | None = None
    output_summary: str | None = None
    output_text: str | None = None
    annotations: tuple[AnnotationRecord, ...] = ()
    details_url: str | None = None

    @property
    def is_actions_job(self) -> bool:
        return self.run_id is not None


@dataclass(frozen=True)
class WorkflowRunRecord:
    """An Actions workflow run; its status and conclusion follow from its newest jobs."""

    id: int
    repo: str
    head_sha: str
    head_branch: str | None
    name: str
    created_at: datetime
    run_attempt: int = 1


@dataclass(frozen=True)
class StatusRecord:
    """A commit status (`state`: error, failure, pending or success) under one `context`."""

    id: int
    repo: str
    sha: str
    context: str
    state: str
    creator: str
    created_at: datetime
    description: str | None = None
    target_url: str | None = None


@dataclass(frozen=True)
class CiEvent:
    """A change of CI the sandbox tells its webhook target about: GitHub's event name
    (check_run, check_suite, workflow_run, status), its action, and the id of what
    changed (check run, check suite, workflow run or status)."""

    event: str
    action: str
    repo: str
    id: int


@dataclass(frozen=True)
class AppRecord:
    """A GitHub App: its id and slug (the bot is `<slug>[bot]`), the public half of its key
    (JWTs are checked against it) and how long the installation tokens it mints live."""

    id: int
    slug: str
    name: str
    owner: str
    public_key_pem: str
    token_lifetime: float = 3600.0
    permissions: dict[str, str] = field(default_factory=dict)
    events: tuple[str, ...] = ()

    @property
    def bot_login(self) -> str:
        return f"{self.slug}[bot]"


@dataclass(frozen=True)
class InstallationRecord:
    """One installation of an app on an account, with the repositories it was granted."""

    id: int
    app_id: int
    account: str
    repos: tuple[str, ...]
    repository_selection: str = "selected"
    permissions: dict[str, str] = field(default_factory=dict)
    suspended: bool = False


@dataclass(frozen=True)
class AppTokenRecord:
    """An installation token: which installation, the repositories and permissions it was
    narrowed to (all of the installation's when not narrowed) and when it expires (epoch)."""

    token: str
    installation_id: int
    repos: tuple[str, ...] | None  # None: whatever the installation holds at the time of use
    permissions: dict[str, str]
    expires_at: float


@dataclass(frozen=True)
class MintRecord:
    """One `POST /app/installations/{id}/access_tokens` as asked: what the tests check."""

    installation_id: int
    repositories: tuple[str, ...] | None
    permissions: dict[str, str] | None
    status: int

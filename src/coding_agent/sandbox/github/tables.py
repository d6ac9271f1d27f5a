"""The tables of the GitHub testing server's world, and the lookups every part shares.

`GitHubState` (state.py) is this base with its parts, one module each: accounts.py
(users, repositories, their git content and permissions), issues.py (labels, issues and
pull requests, assignees), comments.py (comments, review comments, events), ci.py (check runs, workflow
runs, commit statuses) and traffic.py (the rate limit and the request log). Every method takes the one lock here:
the server runs in its own thread.
"""

from __future__ import annotations

import hashlib
import threading
import time
from collections.abc import Callable
from dataclasses import replace
from datetime import UTC, datetime
from typing import Any

from coding_agent.sandbox.git_store import GitRepoStore
from coding_agent.sandbox.github.records import (
    AppRecord,
    AppTokenRecord,
    CheckRunRecord,
    CiEvent,
    CommentRecord,
    EventRecord,
    InstallationRecord,
    IssueRecord,
    LabelRecord,
    MintRecord,
    RateLimitRecord,
    RepoRecord,
    RequestRecord,
    ReviewCommentRecord,
    StatusRecord,
    UserRecord,
    WorkflowRunRecord,
)

__all__ = ["GitHubTables", "NotFoundError", "ValidationFailed", "fake_sha"]


class NotFoundError(LookupError):
    """A user, repository, issue, comment or label that does not exist (HTTP 404)."""


class ValidationFailed(ValueError):
    """A write GitHub would refuse with 422; `code` is GitHub's error code."""

    def __init__(self, message: str, resource: str, code: str = "custom", field: str | None = None) -> None:
        super().__init__(message)
        self.resource = resource
        self.code = code
        self.field = field


def _utc_now() -> datetime:
    return datetime.now(UTC).replace(microsecond=0)


def fake_sha(*parts: object) -> str:
    return hashlib.sha1(":".join(str(part) for part in parts).encode()).hexdigest()


class GitHubTables:
    """The world's records, keyed as GitHub looks them up, under one lock.

    `clock` returns the time stamped on new objects (GitHub's timestamps have whole
    seconds); tests may pass their own to control ordering.
    """

    def __init__(self, clock: Callable[[], datetime] | None = None, rate_limit: int = 5000) -> None:
        self._lock = threading.RLock()
        self._clock = clock or _utc_now
        self._next_id = 1000
        self._users: dict[str, UserRecord] = {}
        self._tokens: dict[str, str] = {}
        self._repos: dict[str, RepoRecord] = {}
        self._permissions: dict[str, dict[str, str]] = {}
        self._labels: dict[str, dict[str, LabelRecord]] = {}
        self._issues: dict[str, dict[int, IssueRecord]] = {}
        self._comments: dict[int, CommentRecord] = {}
        self._review_comments: dict[int, ReviewCommentRecord] = {}
        self._events: list[EventRecord] = []
        self._requests: list[RequestRecord] = []
        self._check_runs: dict[int, CheckRunRecord] = {}
        self._workflow_runs: dict[int, WorkflowRunRecord] = {}
        self._check_suites: dict[tuple[str, str, str], int] = {}
        self._statuses: list[StatusRecord] = []
        self._ci_listeners: list[Callable[[CiEvent], None]] = []
        # GitHub Apps (apps.py): the apps, their installations and the installation tokens.
        self._apps: dict[int, AppRecord] = {}
        self._installations: dict[int, InstallationRecord] = {}
        self._app_tokens: dict[str, AppTokenRecord] = {}
        self._mints: list[MintRecord] = []
        self._expired_uses: dict[str, int] = {}
        self._manifests: dict[str, tuple[dict[str, Any], str]] = {}
        self.rate_limit = RateLimitRecord(limit=rate_limit, remaining=rate_limit, reset=int(time.time()) + 3600)
        # Real git repositories behind the clone URLs, created on first use.
        self.git = GitRepoStore()

    # ---------------------------------------------------------------- lookups

    def _new_id(self) -> int:
        self._next_id += 1
        return self._next_id

    def now(self) -> datetime:
        return self._clock()

    def _repo_key(self, full_name: str) -> str:
        key = full_name.lower()
        if key not in self._repos:
            raise NotFoundError(f"repository {full_name} not found")
        return key

    def _issue(self, repo: str, number: int) -> IssueRecord:
        issues = self._issues[self._repo_key(repo)]
        if number not in issues:
            raise NotFoundError(f"issue {repo}#{number} not found")
        return issues[number]

    def _store_issue(self, issue: IssueRecord) -> IssueRecord:
        self._issues[issue.repo.lower()][issue.number] = issue
        return issue

    def _touch(self, issue: IssueRecord, **changes: Any) -> IssueRecord:
        return self._store_issue(replace(issue, updated_at=self.now(), **changes))

    def _require_user(self, login: str) -> UserRecord:
        user = self._users.get(login.lower())
        if user is None:
            raise NotFoundError(f"user {login} not found")
        return user

    def _ensure_label(self, repo: str, name: str) -> LabelRecord:
        labels = self._labels[self._repo_key(repo)]
        label = labels.get(name.lower())
        if label is None:
            label = LabelRecord(id=self._new_id(), name=name)
            labels[name.lower()] = label
        return label

    def _record_event(self, issue: IssueRecord, event: str, actor: str, **fields: str | None) -> None:
        self._events.append(
            EventRecord(
                id=self._new_id(),
                repo=issue.repo,
                number=issue.number,
                event=event,
                actor=actor,
                created_at=self.now(),
                **fields,
            )
        )

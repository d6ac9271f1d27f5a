"""The in-memory world behind the GitHub testing server.

Tests seed it and inspect it directly from Python; the HTTP layer calls the very same
methods, so what a test sets up and what the agent does over HTTP meet in one place.
Every method takes one lock: the server runs in its own thread.
"""

from __future__ import annotations

import hashlib
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import replace
from datetime import datetime, timezone
from pathlib import Path

from coding_agent.testing.git_http import Files, GitRepoStore
from coding_agent.testing.github.records import (
    PERMISSION_LEVELS,
    CommentRecord,
    EventRecord,
    IssueRecord,
    LabelRecord,
    RateLimitRecord,
    RepoRecord,
    RequestRecord,
    ReviewCommentRecord,
    UserRecord,
)

__all__ = ["GitHubState", "NotFoundError", "ValidationFailed"]


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
    return datetime.now(timezone.utc).replace(microsecond=0)


def _fake_sha(*parts: object) -> str:
    return hashlib.sha1(":".join(str(part) for part in parts).encode()).hexdigest()


class GitHubState:
    """Users, repositories, issues/PRs, labels, comments, events and the request log.

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
        self.rate_limit = RateLimitRecord(limit=rate_limit, remaining=rate_limit, reset=int(time.time()) + 3600)
        # Real git repositories behind the clone URLs, created on first use.
        self.git = GitRepoStore()

    # ---------------------------------------------------------------- helpers

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

    def _touch(self, issue: IssueRecord, **changes: object) -> IssueRecord:
        return self._store_issue(replace(issue, updated_at=self.now(), **changes))  # type: ignore[arg-type]

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
                **fields,  # type: ignore[arg-type]
            )
        )

    # ---------------------------------------------------------------- users and repositories

    def add_user(
        self,
        login: str,
        token: str | None = None,
        *,
        bot: bool = False,
        name: str | None = None,
        email: str | None = None,
    ) -> int:
        """Create a user (idempotent) and optionally a token that authenticates as them.

        `name` and `email` are the public profile fields (GitHub leaves email null unless
        the user made it public).
        """
        with self._lock:
            user = self._users.get(login.lower())
            if user is None:
                user = UserRecord(id=self._new_id(), login=login, created_at=self.now(), bot=bot, name=name, email=email)
                self._users[login.lower()] = user
            if token is not None:
                self._tokens[token] = user.login
            return user.id

    def user(self, login: str) -> UserRecord:
        with self._lock:
            return self._require_user(login)

    def login_for_token(self, token: str) -> str | None:
        with self._lock:
            return self._tokens.get(token)

    def add_repo(
        self,
        full_name: str,
        *,
        default_branch: str = "main",
        private: bool = False,
        description: str | None = None,
        clone_url: str | None = None,
    ) -> int:
        """Create `owner/name` (the owner user too, when missing); the owner is admin.

        `clone_url` overrides the advertised clone URL, e.g. a local bare repository.
        """
        owner, _, name = full_name.partition("/")
        if not owner or not name or "/" in name:
            raise ValueError(f"repository name must be 'owner/name', got {full_name!r}")
        with self._lock:
            if full_name.lower() in self._repos:
                return self._repos[full_name.lower()].id
            self.add_user(owner)
            owner_login = self._require_user(owner).login
            repo = RepoRecord(
                id=self._new_id(),
                owner=owner_login,
                name=name,
                default_branch=default_branch,
                private=private,
                created_at=self.now(),
                description=description,
                clone_url=clone_url,
            )
            key = full_name.lower()
            self._repos[key] = repo
            self._permissions[key] = {}
            self._labels[key] = {}
            self._issues[key] = {}
            return repo.id

    def repo(self, full_name: str) -> RepoRecord:
        with self._lock:
            return self._repos[self._repo_key(full_name)]

    def repos(self) -> list[RepoRecord]:
        with self._lock:
            return list(self._repos.values())

    # ---------------------------------------------------------------- git content

    def init_repo(self, repo: str, files: Files | None = None, message: str = "Initial commit") -> str:
        """Give `repo` its git content: one commit of `files` on the default branch; returns the sha.

        Without this a repository gets a README commit the first time it is cloned.
        """
        record = self.repo(repo)
        return self.git.init(record.full_name, files, branch=record.default_branch, message=message)

    def git_dir(self, repo: str) -> Path:
        """The bare repository behind `repo`'s clone URL (created with a README when new)."""
        record = self.repo(repo)
        return self.git.ensure(record.full_name, record.default_branch)

    def branches(self, repo: str) -> dict[str, str]:
        """`repo`'s git branches (name -> sha); empty before anything created its content."""
        return self.git.branches(self.repo(repo).full_name)

    def create_branch(self, repo: str, branch: str, start: str | None = None) -> str:
        """A new git branch at `start` (default: the default branch); returns its sha."""
        record = self.repo(repo)
        self.git_dir(record.full_name)
        return self.git.create_branch(record.full_name, branch, start or record.default_branch)

    def set_permission(self, repo: str, login: str, level: str | None) -> None:
        """Give `login` a role (admin|maintain|write|triage|read) on `repo`; None removes it."""
        if level is not None and level not in PERMISSION_LEVELS:
            raise ValueError(f"unknown permission level {level!r}: expected one of {', '.join(PERMISSION_LEVELS)}")
        with self._lock:
            key = self._repo_key(repo)
            self.add_user(login)
            if level is None:
                self._permissions[key].pop(login.lower(), None)
            else:
                self._permissions[key][login.lower()] = level

    def permission(self, repo: str, login: str) -> str | None:
        """The role `login` holds: explicit, `admin` for the owner, `read` on a public repo, else None."""
        with self._lock:
            key = self._repo_key(repo)
            record = self._repos[key]
            if record.owner.lower() == login.lower():
                return "admin"
            level = self._permissions[key].get(login.lower())
            if level is not None:
                return level
            return None if record.private else "read"

    def explicit_permission(self, repo: str, login: str) -> str | None:
        """The role granted with `set_permission` (or `admin` for the owner), ignoring visibility."""
        with self._lock:
            key = self._repo_key(repo)
            if self._repos[key].owner.lower() == login.lower():
                return "admin"
            return self._permissions[key].get(login.lower())

    def can(self, repo: str, login: str, level: str) -> bool:
        """Whether `login` holds at least role `level` on `repo`."""
        held = self.permission(repo, login)
        return held is not None and PERMISSION_LEVELS.index(held) >= PERMISSION_LEVELS.index(level)

    # ---------------------------------------------------------------- labels

    def create_label(self, repo: str, name: str, color: str = "ededed", description: str | None = None) -> LabelRecord:
        with self._lock:
            labels = self._labels[self._repo_key(repo)]
            if name.lower() in labels:
                raise ValidationFailed(f"label {name!r} already exists", "Label", "already_exists", "name")
            label = LabelRecord(id=self._new_id(), name=name, color=color.lstrip("#").lower(), description=description)
            labels[name.lower()] = label
            return label

    def label(self, repo: str, name: str) -> LabelRecord:
        with self._lock:
            label = self._labels[self._repo_key(repo)].get(name.lower())
            if label is None:
                raise NotFoundError(f"label {name!r} not found in {repo}")
            return label

    def labels(self, repo: str) -> list[LabelRecord]:
        """The repository's labels, in creation order."""
        with self._lock:
            return list(self._labels[self._repo_key(repo)].values())

    def add_label(self, repo: str, number: int, name: str, actor: str) -> None:
        """Put a label on an issue/PR (creating the repo label), recording a `labeled` event."""
        with self._lock:
            issue = self._issue(repo, number)
            label = self._ensure_label(repo, name)
            if any(existing.lower() == name.lower() for existing in issue.labels):
                return
            issue = self._touch(issue, labels=(*issue.labels, label.name))
            self._record_event(issue, "labeled", actor, label=label.name, label_color=label.color)

    def remove_label(self, repo: str, number: int, name: str, actor: str) -> bool:
        """Take a label off; False (and no event) when it was not there."""
        with self._lock:
            issue = self._issue(repo, number)
            kept = tuple(existing for existing in issue.labels if existing.lower() != name.lower())
            if len(kept) == len(issue.labels):
                return False
            label = self._labels[self._repo_key(repo)].get(name.lower())
            issue = self._touch(issue, labels=kept)
            color = label.color if label else "ededed"
            self._record_event(issue, "unlabeled", actor, label=label.name if label else name, label_color=color)
            return True

    # ---------------------------------------------------------------- issues and pull requests

    def _new_issue_number(self, repo: str) -> int:
        issues = self._issues[self._repo_key(repo)]
        return max(issues, default=0) + 1

    def _open_issue(
        self,
        repo: str,
        title: str,
        body: str,
        author: str | None,
        labels: Iterable[str],
        assignees: Iterable[str],
        **pull: object,
    ) -> int:
        with self._lock:
            record = self.repo(repo)
            author_login = author or record.owner
            self.add_user(author_login)
            now = self.now()
            issue = IssueRecord(
                id=self._new_id(),
                repo=record.full_name,
                number=self._new_issue_number(repo),
                title=title,
                body=body,
                author=self._require_user(author_login).login,
                created_at=now,
                updated_at=now,
                **pull,  # type: ignore[arg-type]
            )
            self._store_issue(issue)
            for name in labels:
                self.add_label(repo, issue.number, name, author_login)
            for login in assignees:
                self.assign(repo, issue.number, login, author_login)
            return issue.number

    def create_issue(
        self,
        repo: str,
        title: str,
        body: str = "",
        author: str | None = None,
        labels: Iterable[str] = (),
        assignees: Iterable[str] = (),
    ) -> int:
        """Open an issue (author defaults to the repo owner); labels/assignees record events by the author."""
        return self._open_issue(repo, title, body, author, labels, assignees)

    def create_pull(
        self,
        repo: str,
        title: str,
        body: str = "",
        author: str | None = None,
        head: str = "feature",
        base: str | None = None,
        labels: Iterable[str] = (),
        assignees: Iterable[str] = (),
        *,
        draft: bool = False,
        head_owner: str | None = None,
    ) -> int:
        """Open a pull request from `head` into `base` (default: the repo's default branch).

        GitHub refuses a second open PR for the same head and base (422), and so does this.
        A same-repository `head` missing from git is created from `base` (the HTTP endpoint
        refuses a missing branch instead, as GitHub does).
        """
        with self._lock:
            record = self.repo(repo)
            base_ref = base or record.default_branch
            owner = head_owner or record.owner
            for existing in self._issues[self._repo_key(repo)].values():
                if (
                    existing.is_pull
                    and existing.state == "open"
                    and existing.head == head
                    and (existing.head_owner or "").lower() == owner.lower()
                    and existing.base == base_ref
                ):
                    raise ValidationFailed(f"A pull request already exists for {owner}:{head}.", "PullRequest")
            head_sha = _fake_sha(repo, head, self._next_id)
            if owner.lower() == record.owner.lower():
                # A PR seeded from Python gets its branch, so that the agent can clone it.
                self.git_dir(record.full_name)
                branches = self.git.branches(record.full_name)
                start = base_ref if base_ref in branches else record.default_branch
                head_sha = branches.get(head) or self.git.create_branch(record.full_name, head, start)
            return self._open_issue(
                repo,
                title,
                body,
                author,
                labels,
                assignees,
                is_pull=True,
                pull_id=self._new_id(),
                head=head,
                head_owner=owner,
                base=base_ref,
                head_sha=head_sha,
                base_sha=_fake_sha(repo, base_ref),
                draft=draft,
            )

    def issue(self, repo: str, number: int) -> IssueRecord:
        """The issue or PR as it is now (labels, assignees, state, branches)."""
        with self._lock:
            return self._issue(repo, number)

    def issues(self) -> list[IssueRecord]:
        """Every issue and PR of every repository."""
        with self._lock:
            return [issue for issues in self._issues.values() for issue in issues.values()]

    def pulls(self, repo: str) -> list[IssueRecord]:
        with self._lock:
            return [issue for issue in self._issues[self._repo_key(repo)].values() if issue.is_pull]

    def update_issue(
        self,
        repo: str,
        number: int,
        *,
        title: str | None = None,
        body: str | None = None,
        state: str | None = None,
    ) -> IssueRecord:
        """Edit title/body, or close/reopen (`state` "open"|"closed")."""
        if state not in (None, "open", "closed"):
            raise ValidationFailed(f"state must be open or closed, got {state!r}", "Issue", "invalid", "state")
        with self._lock:
            issue = self._issue(repo, number)
            changes: dict[str, object] = {}
            if title is not None:
                changes["title"] = title
            if body is not None:
                changes["body"] = body
            if state is not None and state != issue.state:
                changes["state"] = state
                changes["closed_at"] = self.now() if state == "closed" else None
            return self._touch(issue, **changes)

    # ---------------------------------------------------------------- assignees

    def assign(self, repo: str, number: int, login: str, actor: str) -> None:
        """Add an assignee (an `assigned` event by `actor`); unknown users are ignored, as on GitHub."""
        with self._lock:
            issue = self._issue(repo, number)
            user = self._users.get(login.lower())
            if user is None or any(existing.lower() == login.lower() for existing in issue.assignees):
                return
            issue = self._touch(issue, assignees=(*issue.assignees, user.login))
            self._record_event(issue, "assigned", actor, assignee=user.login)

    def unassign(self, repo: str, number: int, login: str, actor: str) -> None:
        with self._lock:
            issue = self._issue(repo, number)
            kept = tuple(existing for existing in issue.assignees if existing.lower() != login.lower())
            if len(kept) == len(issue.assignees):
                return
            issue = self._touch(issue, assignees=kept)
            self._record_event(issue, "unassigned", actor, assignee=self._require_user(login).login)

    # ---------------------------------------------------------------- comments

    def add_comment(self, repo: str, number: int, author: str, body: str) -> int:
        with self._lock:
            issue = self._issue(repo, number)
            self.add_user(author)
            now = self.now()
            comment = CommentRecord(
                id=self._new_id(),
                repo=issue.repo,
                number=number,
                author=self._require_user(author).login,
                body=body,
                created_at=now,
                updated_at=now,
            )
            self._comments[comment.id] = comment
            self._touch(issue)
            return comment.id

    def comment(self, comment_id: int) -> CommentRecord:
        with self._lock:
            if comment_id not in self._comments:
                raise NotFoundError(f"comment {comment_id} not found")
            return self._comments[comment_id]

    def edit_comment(self, comment_id: int, body: str) -> CommentRecord:
        with self._lock:
            comment = replace(self.comment(comment_id), body=body, updated_at=self.now())
            self._comments[comment_id] = comment
            return comment

    def comments(self, repo: str, number: int) -> list[CommentRecord]:
        """Top-level comments of an issue/PR, oldest first."""
        with self._lock:
            issue = self._issue(repo, number)
            return [c for c in self._comments.values() if c.repo == issue.repo and c.number == number]

    def add_review_comment(
        self,
        repo: str,
        number: int,
        author: str,
        body: str,
        path: str = "README.md",
        line: int | None = 1,
        in_reply_to: int | None = None,
    ) -> int:
        """A PR review comment; a reply joins the thread of `in_reply_to`'s root (GitHub has no nesting)."""
        with self._lock:
            issue = self._issue(repo, number)
            if not issue.is_pull:
                raise NotFoundError(f"{repo}#{number} is not a pull request")
            if in_reply_to is not None:
                parent = self.review_comment(in_reply_to)
                if parent.repo != issue.repo or parent.number != number:
                    raise NotFoundError(f"review comment {in_reply_to} is not on {repo}#{number}")
                in_reply_to = parent.in_reply_to_id or parent.id
                path, line = parent.path, parent.line
            self.add_user(author)
            now = self.now()
            comment = ReviewCommentRecord(
                id=self._new_id(),
                repo=issue.repo,
                number=number,
                author=self._require_user(author).login,
                body=body,
                path=path,
                line=line,
                created_at=now,
                updated_at=now,
                commit_id=issue.head_sha or _fake_sha(repo, number),
                in_reply_to_id=in_reply_to,
            )
            self._review_comments[comment.id] = comment
            self._touch(issue)
            return comment.id

    def review_comment(self, comment_id: int) -> ReviewCommentRecord:
        with self._lock:
            if comment_id not in self._review_comments:
                raise NotFoundError(f"review comment {comment_id} not found")
            return self._review_comments[comment_id]

    def review_comments(self, repo: str, number: int) -> list[ReviewCommentRecord]:
        """Review comments of a PR, oldest first."""
        with self._lock:
            issue = self._issue(repo, number)
            return [c for c in self._review_comments.values() if c.repo == issue.repo and c.number == number]

    # ---------------------------------------------------------------- events

    def events(self, repo: str, number: int) -> list[EventRecord]:
        """Issue events (labeled, unlabeled, assigned, unassigned), oldest first."""
        with self._lock:
            issue = self._issue(repo, number)
            return [e for e in self._events if e.repo == issue.repo and e.number == number]

    # ---------------------------------------------------------------- rate limit and request log

    def set_rate_limit(self, *, remaining: int | None = None, limit: int | None = None, reset_in: float | None = None) -> None:
        """Adjust the sandbox rate limit, e.g. `remaining=0` to make the next request a 403."""
        with self._lock:
            if limit is not None:
                self.rate_limit.limit = limit
            if remaining is not None:
                self.rate_limit.remaining = remaining
                self.rate_limit.used = self.rate_limit.limit - remaining
            if reset_in is not None:
                self.rate_limit.reset = int(time.time() + reset_in)

    def take_rate_limit(self) -> bool:
        """Count one request against the limit; False when it is exhausted (answer 403)."""
        with self._lock:
            limit = self.rate_limit
            if limit.reset <= time.time():
                limit.remaining, limit.used, limit.reset = limit.limit, 0, int(time.time()) + 3600
            if limit.remaining <= 0:
                return False
            limit.remaining -= 1
            limit.used += 1
            return True

    def give_back_rate_limit(self) -> None:
        """Undo `take_rate_limit` for a request that turned out to be a 304."""
        with self._lock:
            self.rate_limit.remaining = min(self.rate_limit.remaining + 1, self.rate_limit.limit)
            self.rate_limit.used = max(self.rate_limit.used - 1, 0)

    def rate_limit_headers(self) -> dict[str, str]:
        with self._lock:
            limit = self.rate_limit
            return {
                "X-RateLimit-Limit": str(limit.limit),
                "X-RateLimit-Remaining": str(limit.remaining),
                "X-RateLimit-Reset": str(limit.reset),
                "X-RateLimit-Used": str(limit.used),
                "X-RateLimit-Resource": "core",
            }

    def log_request(self, record: RequestRecord) -> None:
        with self._lock:
            self._requests.append(record)

    def requests(self) -> list[RequestRecord]:
        """Every request answered so far, oldest first."""
        with self._lock:
            return list(self._requests)

    def clear_requests(self) -> None:
        with self._lock:
            self._requests.clear()

    def counted_requests(self) -> list[RequestRecord]:
        """Requests that count against the rate limit: all but 304s and injected faults."""
        return [r for r in self.requests() if not r.not_modified and not r.fault]

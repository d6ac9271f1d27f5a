"""Labels, issues and pull requests, and assignees, in the GitHub testing server.

A label put on or taken off, and an assignee added or removed, is recorded as an issue
event by its actor, as GitHub does.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from coding_agent.sandbox.github.accounts import Accounts
from coding_agent.sandbox.github.records import IssueRecord, LabelRecord
from coding_agent.sandbox.github.tables import NotFoundError, ValidationFailed, fake_sha

__all__ = ["Issues"]


class Issues(Accounts):
    """Issues and PRs of the repositories, with their labels and assignees."""

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
        **pull: Any,
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
                **pull,
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
            head_sha = fake_sha(repo, head, self._next_id)
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
                base_sha=fake_sha(repo, base_ref),
                draft=draft,
            )

    def head_sha(self, pull: IssueRecord, branches: dict[str, str] | None = None) -> str | None:
        """Where `pull`'s head branch points now (a push moves it, as on GitHub); the sha it
        was opened with when the head is another repository's or has no git content.
        `branches`: the repository's, when the caller has read them already."""
        if (pull.head_owner or "").lower() not in ("", self.repo(pull.repo).owner.lower()):
            return pull.head_sha
        branches = self.git.branches(pull.repo) if branches is None else branches
        return branches.get(pull.head or "") or pull.head_sha

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

    def set_draft(self, repo: str, number: int, draft: bool) -> IssueRecord:
        """Mark pull request `number` a draft again, or ready for review."""
        with self._lock:
            pull = self._issue(repo, number)
            if not pull.is_pull:
                raise NotFoundError(f"{repo}#{number} is not a pull request")
            return self._touch(pull, draft=draft) if pull.draft != draft else pull

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

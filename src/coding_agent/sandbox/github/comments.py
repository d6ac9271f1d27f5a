"""Comments, review comments and issue events, in the GitHub testing server."""

from __future__ import annotations

from dataclasses import replace

from coding_agent.sandbox.github.accounts import Accounts
from coding_agent.sandbox.github.records import CommentRecord, EventRecord, ReviewCommentRecord
from coding_agent.sandbox.github.tables import NotFoundError, fake_sha

__all__ = ["Comments"]


class Comments(Accounts):
    """What people wrote on issues and PRs, and what happened to them."""

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
                commit_id=issue.head_sha or fake_sha(repo, number),
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

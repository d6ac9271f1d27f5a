"""GitHub REST v3 JSON shapes of the sandbox records.

githubkit validates every response with pydantic models, so each shape carries every
field those models require (users with all their `*_url`s, labels with `default`,
pull requests with `head`/`base`/`_links` ...). `api` is the server's own base URL
(it plays https://api.github.com); `web` plays https://github.com. The shapes of users
and repositories are `render_accounts.py`, those of CI `render_ci.py`; those of issues,
pull requests, labels, comments and events are here.
"""

from __future__ import annotations

from dataclasses import dataclass

from coding_agent.sandbox.github.records import (
    CommentRecord,
    EventRecord,
    IssueRecord,
    LabelRecord,
    RepoRecord,
    ReviewCommentRecord,
)
from coding_agent.sandbox.github.render_accounts import JSON, node_id, timestamp
from coding_agent.sandbox.github.render_ci import CiShapes
from coding_agent.sandbox.github.state import GitHubState

__all__ = ["Renderer", "timestamp"]


@dataclass(frozen=True)
class Renderer(CiShapes):
    """Turns records into response bodies for one base URL."""

    state: GitHubState
    api: str
    web: str

    # ------------------------------------------------------------ labels

    def label(self, repo: str, record: LabelRecord) -> JSON:
        return {
            "id": record.id,
            "node_id": node_id("LA", record.id),
            "url": f"{self.api}/repos/{repo}/labels/{record.name}".replace(" ", "%20"),
            "name": record.name,
            "description": record.description,
            "color": record.color,
            "default": False,
            "archived_at": None,
            "archived_by": None,
        }

    def issue_labels(self, issue: IssueRecord) -> list[JSON]:
        by_name = {label.name.lower(): label for label in self.state.labels(issue.repo)}
        return [self.label(issue.repo, by_name[name.lower()]) for name in issue.labels if name.lower() in by_name]

    # ------------------------------------------------------------ issues and pulls

    def _association(self, repo: str, login: str) -> str:
        if self.state.repo(repo).owner.lower() == login.lower():
            return "OWNER"
        return "COLLABORATOR" if self.state.explicit_permission(repo, login) else "NONE"

    def issue(self, record: IssueRecord) -> JSON:
        full, number = record.repo, record.number
        api = f"{self.api}/repos/{full}/issues/{number}"
        html_kind = "pull" if record.is_pull else "issues"
        assignees = [self.login(login) for login in record.assignees]
        body: JSON = {
            "id": record.id,
            "node_id": node_id("PR" if record.is_pull else "I", record.id),
            "url": api,
            "repository_url": f"{self.api}/repos/{full}",
            "labels_url": f"{api}/labels{{/name}}",
            "comments_url": f"{api}/comments",
            "events_url": f"{api}/events",
            "html_url": f"{self.web}/{full}/{html_kind}/{number}",
            "timeline_url": f"{api}/timeline",
            "number": number,
            "state": record.state,
            "state_reason": "completed" if record.state == "closed" else None,
            "title": record.title,
            "body": record.body,
            "user": self.login(record.author),
            "labels": self.issue_labels(record),
            "assignee": assignees[0] if assignees else None,
            "assignees": assignees,
            "milestone": None,
            "locked": False,
            "active_lock_reason": None,
            "comments": len(self.state.comments(full, number)),
            "created_at": timestamp(record.created_at),
            "updated_at": timestamp(record.updated_at),
            "closed_at": timestamp(record.closed_at),
            "author_association": self._association(full, record.author),
            "performed_via_github_app": None,
        }
        if record.is_pull:
            pull_api = f"{self.api}/repos/{full}/pulls/{number}"
            body["draft"] = record.draft
            body["pull_request"] = {
                "url": pull_api,
                "html_url": f"{self.web}/{full}/pull/{number}",
                "diff_url": f"{self.web}/{full}/pull/{number}.diff",
                "patch_url": f"{self.web}/{full}/pull/{number}.patch",
                "merged_at": None,
            }
        return body

    def search_item(self, record: IssueRecord) -> JSON:
        return {**self.issue(record), "score": 1.0}

    def _branch(self, repo: RepoRecord, owner: str, ref: str, sha: str) -> JSON:
        return {
            "label": f"{owner}:{ref}",
            "ref": ref,
            "sha": sha,
            "user": self.login(owner),
            "repo": self.repo(repo),
        }

    def pull(self, record: IssueRecord) -> JSON:
        """The full pull-request shape (GET /pulls/{n}); list endpoints use it too."""
        full, number = record.repo, record.number
        repo = self.state.repo(full)
        api = f"{self.api}/repos/{full}/pulls/{number}"
        issue_api = f"{self.api}/repos/{full}/issues/{number}"
        html = f"{self.web}/{full}/pull/{number}"
        issue = self.issue(record)
        head_owner = record.head_owner or repo.owner
        head_sha = self.state.head_sha(record)
        head_repo = repo
        if head_owner.lower() != repo.owner.lower():
            try:
                head_repo = self.state.repo(f"{head_owner}/{repo.name}")
            except LookupError:
                head_repo = repo
        return {
            "url": api,
            "id": record.pull_id or record.id,
            "node_id": node_id("PR", record.pull_id or record.id),
            "html_url": html,
            "diff_url": f"{html}.diff",
            "patch_url": f"{html}.patch",
            "issue_url": issue_api,
            "commits_url": f"{api}/commits",
            "review_comments_url": f"{api}/comments",
            "review_comment_url": f"{self.api}/repos/{full}/pulls/comments{{/number}}",
            "comments_url": f"{issue_api}/comments",
            "statuses_url": f"{self.api}/repos/{full}/statuses/{head_sha}",
            "number": number,
            "state": record.state,
            "locked": False,
            "title": record.title,
            "user": issue["user"],
            "body": record.body,
            "labels": issue["labels"],
            "milestone": None,
            "active_lock_reason": None,
            "created_at": issue["created_at"],
            "updated_at": issue["updated_at"],
            "closed_at": issue["closed_at"],
            "merged_at": None,
            "merge_commit_sha": None,
            "assignee": issue["assignee"],
            "assignees": issue["assignees"],
            "requested_reviewers": [],
            "requested_teams": [],
            "head": self._branch(head_repo, head_owner, record.head or "", head_sha or ""),
            "base": self._branch(repo, repo.owner, record.base or repo.default_branch, record.base_sha or ""),
            "_links": {
                "self": {"href": api},
                "html": {"href": html},
                "issue": {"href": issue_api},
                "comments": {"href": f"{issue_api}/comments"},
                "review_comments": {"href": f"{api}/comments"},
                "review_comment": {"href": f"{self.api}/repos/{full}/pulls/comments{{/number}}"},
                "commits": {"href": f"{api}/commits"},
                "statuses": {"href": f"{self.api}/repos/{full}/statuses/{head_sha}"},
            },
            "author_association": issue["author_association"],
            "auto_merge": None,
            "draft": record.draft,
            "merged": record.merged,
            "mergeable": True,
            "rebaseable": True,
            "mergeable_state": "clean",
            "merged_by": None,
            "comments": issue["comments"],
            "review_comments": len(self.state.review_comments(full, number)),
            "maintainer_can_modify": False,
            "commits": 1,
            "additions": 0,
            "deletions": 0,
            "changed_files": 0,
        }

    # ------------------------------------------------------------ comments and events

    def comment(self, record: CommentRecord) -> JSON:
        full = record.repo
        issue = self.state.issue(full, record.number)
        kind = "pull" if issue.is_pull else "issues"
        return {
            "id": record.id,
            "node_id": node_id("IC", record.id),
            "url": f"{self.api}/repos/{full}/issues/comments/{record.id}",
            "html_url": f"{self.web}/{full}/{kind}/{record.number}#issuecomment-{record.id}",
            "body": record.body,
            "user": self.login(record.author),
            "created_at": timestamp(record.created_at),
            "updated_at": timestamp(record.updated_at),
            "issue_url": f"{self.api}/repos/{full}/issues/{record.number}",
            "author_association": self._association(full, record.author),
            "performed_via_github_app": None,
        }

    def review_comment(self, record: ReviewCommentRecord) -> JSON:
        full = record.repo
        api = f"{self.api}/repos/{full}/pulls/comments/{record.id}"
        html = f"{self.web}/{full}/pull/{record.number}#discussion_r{record.id}"
        pull_api = f"{self.api}/repos/{full}/pulls/{record.number}"
        body: JSON = {
            "url": api,
            "pull_request_review_id": record.id,
            "id": record.id,
            "node_id": node_id("PRRC", record.id),
            "diff_hunk": f"@@ -{record.line or 1},1 +{record.line or 1},1 @@",
            "path": record.path,
            "position": record.line,
            "original_position": record.line,
            "commit_id": record.commit_id,
            "original_commit_id": record.commit_id,
            "user": self.login(record.author),
            "body": record.body,
            "created_at": timestamp(record.created_at),
            "updated_at": timestamp(record.updated_at),
            "html_url": html,
            "pull_request_url": pull_api,
            "author_association": self._association(full, record.author),
            "_links": {"self": {"href": api}, "html": {"href": html}, "pull_request": {"href": pull_api}},
            "start_line": None,
            "original_start_line": None,
            "start_side": None,
            "line": record.line,
            "original_line": record.line,
            "side": "RIGHT",
            "subject_type": "line",
        }
        if record.in_reply_to_id is not None:
            body["in_reply_to_id"] = record.in_reply_to_id
        return body

    def event(self, record: EventRecord) -> JSON:
        body: JSON = {
            "id": record.id,
            "node_id": node_id("E", record.id),
            "url": f"{self.api}/repos/{record.repo}/issues/events/{record.id}",
            "actor": self.login(record.actor),
            "event": record.event,
            "commit_id": None,
            "commit_url": None,
            "created_at": timestamp(record.created_at),
            "performed_via_github_app": None,
        }
        if record.label is not None:
            body["label"] = {"name": record.label, "color": record.label_color or "ededed"}
        if record.assignee is not None:
            body["assignee"] = self.login(record.assignee)
            body["assigner"] = self.login(record.actor)
        return body

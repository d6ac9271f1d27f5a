"""GitHub REST v3 JSON shapes of the sandbox records.

githubkit validates every response with pydantic models, so each shape carries every
field those models require (users with all their `*_url`s, labels with `default`,
pull requests with `head`/`base`/`_links` ...). `api` is the server's own base URL
(it plays https://api.github.com); `web` plays https://github.com.
"""

from __future__ import annotations

import base64
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from coding_agent.testing.github.records import (
    PERMISSION_LEVELS,
    CommentRecord,
    EventRecord,
    IssueRecord,
    LabelRecord,
    RepoRecord,
    ReviewCommentRecord,
    UserRecord,
)
from coding_agent.testing.github.state import GitHubState

__all__ = ["Renderer", "timestamp"]

JSON = dict[str, Any]


def timestamp(value: datetime | None) -> str | None:
    """ISO 8601 in UTC with a `Z`, whole seconds, as GitHub writes it."""
    return None if value is None else value.strftime("%Y-%m-%dT%H:%M:%SZ")


def _node_id(prefix: str, number: int) -> str:
    return f"{prefix}_" + base64.b64encode(f"{prefix}{number}".encode()).decode().rstrip("=")


@dataclass(frozen=True)
class Renderer:
    """Turns records into response bodies for one base URL."""

    state: GitHubState
    api: str
    web: str

    # ------------------------------------------------------------ users

    def user(self, record: UserRecord) -> JSON:
        login, api = record.login, f"{self.api}/users/{record.login}"
        return {
            "login": login,
            "id": record.id,
            "node_id": _node_id("U", record.id),
            "avatar_url": f"{self.web}/avatars/{login}",
            "gravatar_id": "",
            "url": api,
            "html_url": f"{self.web}/{login}",
            "followers_url": f"{api}/followers",
            "following_url": f"{api}/following{{/other_user}}",
            "gists_url": f"{api}/gists{{/gist_id}}",
            "starred_url": f"{api}/starred{{/owner}}{{/repo}}",
            "subscriptions_url": f"{api}/subscriptions",
            "organizations_url": f"{api}/orgs",
            "repos_url": f"{api}/repos",
            "events_url": f"{api}/events{{/privacy}}",
            "received_events_url": f"{api}/received_events",
            "type": record.type,
            "user_view_type": "public",
            "site_admin": False,
        }

    def login(self, login: str) -> JSON:
        return self.user(self.state.user(login))

    def authenticated_user(self, login: str) -> JSON:
        """GET /user: the private-user shape."""
        record = self.state.user(login)
        created = timestamp(record.created_at)
        return {
            **self.user(record),
            "name": record.name or login,
            "company": None,
            "blog": "",
            "location": None,
            "email": record.email,
            "hireable": None,
            "bio": None,
            "twitter_username": None,
            "public_repos": 0,
            "public_gists": 0,
            "followers": 0,
            "following": 0,
            "created_at": created,
            "updated_at": created,
            "private_gists": 0,
            "total_private_repos": 0,
            "owned_private_repos": 0,
            "disk_usage": 0,
            "collaborators": 0,
            "two_factor_authentication": False,
        }

    # ------------------------------------------------------------ repositories

    def repo(self, record: RepoRecord) -> JSON:
        full, api = record.full_name, f"{self.api}/repos/{record.full_name}"
        created = timestamp(record.created_at)
        open_count = sum(1 for i in self.state.issues() if i.repo == full and i.state == "open")
        return {
            "id": record.id,
            "node_id": _node_id("R", record.id),
            "name": record.name,
            "full_name": full,
            "owner": self.login(record.owner),
            "private": record.private,
            "visibility": "private" if record.private else "public",
            "html_url": f"{self.web}/{full}",
            "description": record.description,
            "fork": False,
            "url": api,
            "archive_url": f"{api}/{{archive_format}}{{/ref}}",
            "assignees_url": f"{api}/assignees{{/user}}",
            "blobs_url": f"{api}/git/blobs{{/sha}}",
            "branches_url": f"{api}/branches{{/branch}}",
            "collaborators_url": f"{api}/collaborators{{/collaborator}}",
            "comments_url": f"{api}/comments{{/number}}",
            "commits_url": f"{api}/commits{{/sha}}",
            "compare_url": f"{api}/compare/{{base}}...{{head}}",
            "contents_url": f"{api}/contents/{{+path}}",
            "contributors_url": f"{api}/contributors",
            "deployments_url": f"{api}/deployments",
            "downloads_url": f"{api}/downloads",
            "events_url": f"{api}/events",
            "forks_url": f"{api}/forks",
            "git_commits_url": f"{api}/git/commits{{/sha}}",
            "git_refs_url": f"{api}/git/refs{{/sha}}",
            "git_tags_url": f"{api}/git/tags{{/sha}}",
            "git_url": f"git://{self.web.split('://', 1)[-1]}/{full}.git",
            "issue_comment_url": f"{api}/issues/comments{{/number}}",
            "issue_events_url": f"{api}/issues/events{{/number}}",
            "issues_url": f"{api}/issues{{/number}}",
            "keys_url": f"{api}/keys{{/key_id}}",
            "labels_url": f"{api}/labels{{/name}}",
            "languages_url": f"{api}/languages",
            "merges_url": f"{api}/merges",
            "milestones_url": f"{api}/milestones{{/number}}",
            "notifications_url": f"{api}/notifications{{?since,all,participating}}",
            "pulls_url": f"{api}/pulls{{/number}}",
            "releases_url": f"{api}/releases{{/id}}",
            "ssh_url": f"git@{self.web.split('://', 1)[-1].split('/')[0]}:{full}.git",
            "stargazers_url": f"{api}/stargazers",
            "statuses_url": f"{api}/statuses/{{sha}}",
            "subscribers_url": f"{api}/subscribers",
            "subscription_url": f"{api}/subscription",
            "tags_url": f"{api}/tags",
            "teams_url": f"{api}/teams",
            "trees_url": f"{api}/git/trees{{/sha}}",
            "clone_url": record.clone_url or f"{self.web}/{full}.git",
            "mirror_url": None,
            "hooks_url": f"{api}/hooks",
            "svn_url": f"{self.web}/{full}",
            "homepage": None,
            "language": None,
            "forks_count": 0,
            "forks": 0,
            "stargazers_count": 0,
            "watchers_count": 0,
            "watchers": 0,
            "size": 0,
            "default_branch": record.default_branch,
            "open_issues_count": open_count,
            "open_issues": open_count,
            "is_template": False,
            "topics": [],
            "has_issues": True,
            "has_projects": False,
            "has_wiki": False,
            "has_pages": False,
            "has_downloads": False,
            "has_discussions": False,
            "archived": False,
            "disabled": False,
            "pushed_at": created,
            "created_at": created,
            "updated_at": created,
            "allow_forking": True,
            "web_commit_signoff_required": False,
            "subscribers_count": 0,
            "network_count": 0,
            "license": None,
        }

    # ------------------------------------------------------------ labels

    def label(self, repo: str, record: LabelRecord) -> JSON:
        return {
            "id": record.id,
            "node_id": _node_id("LA", record.id),
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
            "node_id": _node_id("PR" if record.is_pull else "I", record.id),
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
        head_repo = repo
        if head_owner.lower() != repo.owner.lower():
            try:
                head_repo = self.state.repo(f"{head_owner}/{repo.name}")
            except LookupError:
                head_repo = repo
        return {
            "url": api,
            "id": record.pull_id or record.id,
            "node_id": _node_id("PR", record.pull_id or record.id),
            "html_url": html,
            "diff_url": f"{html}.diff",
            "patch_url": f"{html}.patch",
            "issue_url": issue_api,
            "commits_url": f"{api}/commits",
            "review_comments_url": f"{api}/comments",
            "review_comment_url": f"{self.api}/repos/{full}/pulls/comments{{/number}}",
            "comments_url": f"{issue_api}/comments",
            "statuses_url": f"{self.api}/repos/{full}/statuses/{record.head_sha}",
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
            "head": self._branch(head_repo, head_owner, record.head or "", record.head_sha or ""),
            "base": self._branch(repo, repo.owner, record.base or repo.default_branch, record.base_sha or ""),
            "_links": {
                "self": {"href": api},
                "html": {"href": html},
                "issue": {"href": issue_api},
                "comments": {"href": f"{issue_api}/comments"},
                "review_comments": {"href": f"{api}/comments"},
                "review_comment": {"href": f"{self.api}/repos/{full}/pulls/comments{{/number}}"},
                "commits": {"href": f"{api}/commits"},
                "statuses": {"href": f"{self.api}/repos/{full}/statuses/{record.head_sha}"},
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
            "node_id": _node_id("IC", record.id),
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
            "node_id": _node_id("PRRC", record.id),
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
            "node_id": _node_id("E", record.id),
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

    def permission(self, repo: str, login: str) -> JSON:
        """GitHub folds maintain into `write` and triage into `read`; `role_name` keeps the fine level."""
        level = self.state.permission(repo, login)
        coarse = {"admin": "admin", "maintain": "write", "write": "write", "triage": "read", "read": "read"}
        permission = coarse.get(level or "", "none")
        role = level or "none"
        held = PERMISSION_LEVELS.index(level) if level in PERMISSION_LEVELS else -1
        return {
            "permission": permission,
            "role_name": role,
            "user": {
                **self.login(login),
                "permissions": {
                    "pull": held >= 0,
                    "triage": held >= 1,
                    "push": held >= 2,
                    "maintain": held >= 3,
                    "admin": held >= 4,
                },
                "role_name": role,
            },
        }

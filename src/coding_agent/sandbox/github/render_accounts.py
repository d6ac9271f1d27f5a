"""GitHub REST v3 JSON shapes of the sandbox's users and repositories (see `render.py`).

Each carries every field githubkit's pydantic models require: a user with all its
`*_url`s, a repository with its ~80 fields and URL templates.
"""

from __future__ import annotations

import base64
from datetime import datetime
from typing import Any

from coding_agent.sandbox.github.records import PERMISSION_LEVELS, RepoRecord, UserRecord
from coding_agent.sandbox.github.state import GitHubState

__all__ = ["AccountShapes", "JSON", "timestamp", "node_id"]

JSON = dict[str, Any]


def timestamp(value: datetime | None) -> str | None:
    """ISO 8601 in UTC with a `Z`, whole seconds, as GitHub writes it."""
    return None if value is None else value.strftime("%Y-%m-%dT%H:%M:%SZ")


def node_id(prefix: str, number: int) -> str:
    return f"{prefix}_" + base64.b64encode(f"{prefix}{number}".encode()).decode().rstrip("=")


class AccountShapes:
    """Users, repositories and a user's permission on one, for one base URL (`api`, `web`)."""

    state: GitHubState
    api: str
    web: str

    # ------------------------------------------------------------ users

    def user(self, record: UserRecord) -> JSON:
        login, api = record.login, f"{self.api}/users/{record.login}"
        return {
            "login": login,
            "id": record.id,
            "node_id": node_id("U", record.id),
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
        full = record.full_name
        created = timestamp(record.created_at)
        open_count = sum(1 for i in self.state.issues() if i.repo == full and i.state == "open")
        return {
            "id": record.id,
            "node_id": node_id("R", record.id),
            "name": record.name,
            "full_name": full,
            "owner": self.login(record.owner),
            "private": record.private,
            "visibility": "private" if record.private else "public",
            "html_url": f"{self.web}/{full}",
            "description": record.description,
            "fork": False,
            **self._repo_urls(record),
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

    def _repo_urls(self, record: RepoRecord) -> JSON:
        """The repository's API URLs and URL templates, and where it is cloned from."""
        full, api = record.full_name, f"{self.api}/repos/{record.full_name}"
        host = self.web.split("://", 1)[-1]
        return {
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
            "git_url": f"git://{host}/{full}.git",
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
            "ssh_url": f"git@{host.split('/')[0]}:{full}.git",
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
        }

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

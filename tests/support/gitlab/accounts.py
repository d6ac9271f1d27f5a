"""Users, groups, projects, members and the projects' git content, in the GitLab testing server."""

from __future__ import annotations

from pathlib import Path

from coding_agent.sandbox.git_store import Files
from tests.support.gitlab.models import Group, Project, User
from tests.support.gitlab.tables import GitLabTables

__all__ = ["Accounts"]


class Accounts(GitLabTables):
    """Who exists, in which groups and projects, with which access level."""

    # -- users, groups, projects, members -------------------------------------

    def add_user(self, username: str, token: str | None = None, *, name: str | None = None, bot: bool = False) -> int:
        """Create a user; `token` (default `glpat-<username>`) authenticates API calls. Returns the id."""
        with self.lock:
            if self.find_user(username) is not None:
                raise ValueError(f"user {username!r} exists already")
            user_id = self.next_id("user")
            tokens = {token or f"glpat-{username}"}
            self.users[user_id] = User(user_id, username, name or username, tokens, self.clock.now(), bot)
            return user_id

    def add_token(self, username: str, token: str) -> None:
        with self.lock:
            self.require_user(username).tokens.add(token)

    def set_token_expiry(self, token: str, expires_at: str | None) -> None:
        """When `token` expires (`YYYY-MM-DD`, GitLab's form), as `/personal_access_tokens/self` says."""
        with self.lock:
            self.token_expiries[token] = expires_at

    def token_for(self, username: str) -> str:
        """One token of `username` (the first one created)."""
        with self.lock:
            return sorted(self.require_user(username).tokens)[0]

    def add_group(self, full_path: str, name: str | None = None) -> int:
        """Create a group and any missing parent groups; returns the id (existing or new)."""
        with self.lock:
            existing = self.find_group(full_path)
            if existing is not None:
                return existing.id
            parent_id = None
            if "/" in full_path:
                parent_id = self.add_group(full_path.rsplit("/", 1)[0])
            group_id = self.next_id("namespace")
            leaf = full_path.rsplit("/", 1)[-1]
            self.groups[group_id] = Group(group_id, full_path, name or leaf, parent_id, self.clock.now())
            return group_id

    def add_project(self, path_with_namespace: str, *, default_branch: str = "main", description: str = "") -> int:
        """Create a project in its group (created when missing); returns the id."""
        with self.lock:
            if "/" not in path_with_namespace:
                raise ValueError(f"project path must be 'group/project', got {path_with_namespace!r}")
            if self.find_project(path_with_namespace) is not None:
                raise ValueError(f"project {path_with_namespace!r} exists already")
            namespace_id = self.add_group(path_with_namespace.rsplit("/", 1)[0])
            project_id = self.next_id("project")
            self.projects[project_id] = Project(
                project_id, path_with_namespace, namespace_id, default_branch, description, self.clock.now()
            )
            return project_id

    def init_repo(self, project: str | int, files: Files | None = None, message: str = "Initial commit") -> str:
        """Give the project its git content: one commit of `files` on the default branch; returns the sha.

        Without this a project gets a README commit the first time it is cloned.
        """
        record = self.require_project(project)
        return self.git.init(record.path_with_namespace, files, branch=record.default_branch, message=message)

    def git_dir(self, project: str | int) -> Path:
        """The bare repository behind the project's `http_url_to_repo` (created with a README when new)."""
        record = self.require_project(project)
        return self.git.ensure(record.path_with_namespace, record.default_branch)

    def branches(self, project: str | int) -> dict[str, str]:
        """The project's git branches (name -> sha); empty before anything created its content."""
        return self.git.branches(self.require_project(project).path_with_namespace)

    def create_branch(self, project: str | int, branch: str, start: str | None = None) -> str:
        """A new git branch at `start` (default: the default branch); returns its sha."""
        record = self.require_project(project)
        self.git_dir(record.id)
        return self.git.create_branch(record.path_with_namespace, branch, start or record.default_branch)

    def set_access(self, path: str, username: str, level: int | None) -> None:
        """Make `username` a member of a project or group at `level` (None or 0 removes)."""
        with self.lock:
            user = self.require_user(username)
            project = self.find_project(path)
            members = project.members if project is not None else self.require_group(path).members
            if level:
                members[user.id] = level
            else:
                members.pop(user.id, None)

    def access_level(self, project: str | int, user_id: int) -> int | None:
        """Effective level, inherited from ancestor groups like GitLab's `members/all`."""
        with self.lock:
            record = self.require_project(project)
            levels = [record.members.get(user_id, 0)]
            group: Group | None = self.groups.get(record.namespace_id)
            while group is not None:
                levels.append(group.members.get(user_id, 0))
                group = self.groups.get(group.parent_id) if group.parent_id is not None else None
            best = max(levels)
            return best or None

"""Users, repositories, their git content and permissions, in the GitHub testing server."""

from __future__ import annotations

from pathlib import Path

from coding_agent.sandbox.git_store import Files
from coding_agent.sandbox.github.records import PERMISSION_LEVELS, RepoRecord, UserRecord
from coding_agent.sandbox.github.tables import GitHubTables

__all__ = ["Accounts"]


class Accounts(GitHubTables):
    """Who exists, which repositories, what each user may do in each."""

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

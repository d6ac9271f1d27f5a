"""The tables of the GitLab testing server's world, and the lookups every part shares.

`GitLabState` (state.py) is this base with its parts, one module each: accounts.py
(users, groups, projects, members, their git content), issues.py (issues and merge
requests, their labels and assignees), notes.py (notes and discussions), ci.py
(pipelines, jobs, traces and the webhooks they send), readers.py
(copies for tests to keep) and traffic.py (the request log). Every public method takes
the one lock; `lock` is public so the HTTP layer can read a consistent picture while it
serialises a response.
"""

from __future__ import annotations

import itertools
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Self

from coding_agent.sandbox.git_store import GitRepoStore
from tests.support.gitlab.models import (
    Clock,
    Group,
    Item,
    Project,
    RequestRecord,
    User,
    normalise_kind,
)

__all__ = ["GitLabTables"]


class GitLabTables:
    """Users, groups and projects (which hold their issues, MRs and labels), the request
    log and the id sequences, under one lock."""

    def __init__(self) -> None:
        self.lock = threading.RLock()
        self.clock = Clock()
        self._ids: dict[str, Iterator[int]] = {}
        self.users: dict[int, User] = {}
        # token -> its expiry date (ISO `YYYY-MM-DD`), for GET /personal_access_tokens/self
        self.token_expiries: dict[str, str | None] = {}
        self.groups: dict[int, Group] = {}
        self.projects: dict[int, Project] = {}
        self._requests: list[RequestRecord] = []
        # Real git repositories behind `http_url_to_repo`, created on first use.
        self.git = GitRepoStore()

    # -- identifiers -------------------------------------------------------------

    def next_id(self, sequence: str) -> int:
        with self.lock:
            counter = self._ids.setdefault(sequence, itertools.count(1))
            return next(counter)

    # -- lookups -----------------------------------------------------------------

    def find_user(self, username: str) -> User | None:
        with self.lock:
            return next((user for user in self.users.values() if user.username == username), None)

    def require_user(self, username: str) -> User:
        user = self.find_user(username)
        if user is None:
            raise KeyError(f"no user {username!r} in the GitLab testing server")
        return user

    def user_by_token(self, token: str) -> User | None:
        with self.lock:
            return next((user for user in self.users.values() if token in user.tokens), None)

    def find_group(self, ref: str | int) -> Group | None:
        with self.lock:
            if isinstance(ref, int) or str(ref).isdigit():
                return self.groups.get(int(ref))
            return next((group for group in self.groups.values() if group.full_path == ref), None)

    def require_group(self, ref: str | int) -> Group:
        group = self.find_group(ref)
        if group is None:
            raise KeyError(f"no group {ref!r} in the GitLab testing server")
        return group

    def find_project(self, ref: str | int) -> Project | None:
        with self.lock:
            if isinstance(ref, int) or str(ref).isdigit():
                return self.projects.get(int(ref))
            return next((p for p in self.projects.values() if p.path_with_namespace == ref), None)

    def require_project(self, ref: str | int) -> Project:
        project = self.find_project(ref)
        if project is None:
            raise KeyError(f"no project {ref!r} in the GitLab testing server")
        return project

    def projects_in_group(self, group: Group) -> list[Project]:
        """Projects of the group and of its subgroups, as GitLab's group listings include."""
        with self.lock:
            prefix = group.full_path + "/"
            return [project for project in self.projects.values() if project.path_with_namespace.startswith(prefix)]

    def require_item(self, project: str | int, iid: int, kind: str = "issue") -> Item:
        with self.lock:
            record = self.require_project(project)
            item = record.items(normalise_kind(kind)).get(iid)
            if item is None:
                raise KeyError(f"no {normalise_kind(kind)} {iid} in project {record.path_with_namespace!r}")
            return item

    @contextmanager
    def locked(self) -> Iterator[Self]:
        """Hold the lock across several reads or writes."""
        with self.lock:
            yield self

"""Immutable descriptions of the things the agent works on: tasks, comments, threads.

These types carry no I/O. Sources (GitHub, GitLab) build them from API responses; the
loop, the steering and the context builders only ever read them.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from datetime import datetime
from enum import Enum
from typing import Literal, cast

__all__ = [
    "Forge",
    "TaskKind",
    "TaskKey",
    "Task",
    "Comment",
    "Thread",
    "ThreadRef",
    "Permission",
    "canonical_project",
]

Forge = Literal["github", "gitlab"]


class TaskKind(str, Enum):
    """An issue, or a change request (GitHub pull request / GitLab merge request)."""

    ISSUE = "issue"
    CHANGE = "change"


_KEY_PATTERN = re.compile(r"^(?P<forge>github|gitlab):(?P<project>[^#!\s]+)(?P<sep>[#!])(?P<number>[0-9]+)$")

# The forge's own name characters, per path segment (ASCII only: `\w` would let in look-alike
# letters). A GitHub owner is letters, digits, `-` (and `_` for Enterprise managed users);
# a repository, and each of a GitLab project's group, subgroup and project paths, adds `.`.
_GITHUB_OWNER = re.compile(r"[A-Za-z0-9_-]{1,100}")
_NAME = re.compile(r"[A-Za-z0-9_.-]{1,255}")
_MAX_GITLAB_DEPTH = 21  # a top-level group, 20 nested subgroups (GitLab's limit), the project


def canonical_project(forge: str, project: str) -> str:
    """`project` unchanged when it is a canonical repository name of `forge`, else a
    ValueError naming what is wrong.

    A task key is canonical before any check (SPEC 15): a key that could be read as one
    repository by the scope check and reach another through the forge's URLs
    (`acme/../evil/x`, an encoded slash, a percent-escape) is no key at all. GitHub:
    exactly `owner/repo`; GitLab: `group[/subgroup...]/project`. No segment is `.` or
    `..`, and only the forge's own name characters appear, so every route (queue message,
    webhook, poll, CLI, dashboard) that builds a `TaskKey` is held to the same rule."""
    segments = project.split("/")
    if forge == "github" and len(segments) != 2:
        raise ValueError(f"not a canonical GitHub repository {project!r}: expected 'owner/repo'")
    if forge == "gitlab" and not 2 <= len(segments) <= _MAX_GITLAB_DEPTH:
        raise ValueError(f"not a canonical GitLab project path {project!r}: expected 'group/project'")
    for index, segment in enumerate(segments):
        owner = forge == "github" and index == 0
        if segment in (".", "..") or (_GITHUB_OWNER if owner else _NAME).fullmatch(segment) is None:
            what = "owner" if owner else "name"
            raise ValueError(
                f"not a canonical {forge} repository {project!r}: {what} segment {segment!r} is not made of the forge's"
                " name characters (letters, digits, '-', '_'" + ("" if owner else ", '.'") + "; no '.' or '..' segment)"
            )
    return project


@dataclass(frozen=True, order=True)
class TaskKey:
    """Identifies one task: `github:owner/repo#12`, `gitlab:group/project!34`.

    `#` marks an issue, `!` a PR/MR, as SPEC section 2 writes them; the string form is
    what the state store, the queue, the logs and the CLI use.
    """

    forge: Forge
    project: str
    kind: TaskKind
    number: int

    def __post_init__(self) -> None:
        if self.forge not in ("github", "gitlab"):
            raise ValueError(f"unknown forge {self.forge!r}: expected 'github' or 'gitlab'")
        if not self.project or "/" not in self.project:
            raise ValueError(f"task project must be 'owner/repo' (or 'group/project'), got {self.project!r}")
        canonical_project(self.forge, self.project)
        if self.number < 1:
            raise ValueError(f"task number must be positive, got {self.number}")

    def __str__(self) -> str:
        sep = "#" if self.kind is TaskKind.ISSUE else "!"
        return f"{self.forge}:{self.project}{sep}{self.number}"

    @classmethod
    def parse(cls, text: str) -> TaskKey:
        """Parse the string form; raise ValueError naming the text when it is malformed or
        not canonical (`canonical_project`). The one parser of every route a key arrives by."""
        match = _KEY_PATTERN.match(text.strip())
        if match is None:
            raise ValueError(
                f"not a task key: {text[:300]!r} (expected e.g. 'github:owner/repo#12' or 'gitlab:group/project!34')"
            )
        kind = TaskKind.ISSUE if match["sep"] == "#" else TaskKind.CHANGE
        try:
            return cls(cast(Forge, match["forge"]), match["project"], kind, int(match["number"]))  # the pattern's forges
        except ValueError as error:
            raise ValueError(f"not a canonical task key: {text.strip()[:300]!r} ({error})") from None

    @property
    def is_change(self) -> bool:
        return self.kind is TaskKind.CHANGE


@dataclass(frozen=True)
class Comment:
    """One comment on a task. `thread_id` is set for PR review comments / MR discussion notes."""

    id: str
    author: str
    body: str
    created_at: datetime
    thread_id: str | None = None


@dataclass(frozen=True)
class Thread:
    """A discussion thread: a PR review thread or an MR discussion. The first comment is its root."""

    id: str
    comments: tuple[Comment, ...]
    path: str | None = None
    line: int | None = None


@dataclass(frozen=True)
class ThreadRef:
    """Where a run answers when a review thread asked it (SPEC 3, 7): the PR/MR `change`
    (the one the agent opened for an issue task) and the thread's id on it.

    The string form `<change key> <thread id>` is what a run's metadata keeps, so that a
    continued run (after a pause or a takeover) still answers in that thread.
    """

    change: TaskKey
    thread_id: str

    def __str__(self) -> str:
        return f"{self.change} {self.thread_id}"

    @classmethod
    def parse(cls, text: str) -> ThreadRef:
        key, _, thread_id = text.strip().partition(" ")
        if not thread_id:
            raise ValueError(f"not a thread reference: {text!r} (expected '<task key> <thread id>')")
        return cls(TaskKey.parse(key), thread_id)


@dataclass(frozen=True)
class Task:
    """A snapshot of an issue or PR/MR as read from the forge.

    A snapshot goes stale: steering re-reads assignees and comments from the forge rather
    than trusting these fields (SPEC 8.2).
    """

    key: TaskKey
    title: str
    body: str
    author: str
    labels: tuple[str, ...]
    assignees: tuple[str, ...]
    url: str
    created_at: datetime
    updated_at: datetime
    state: str = "open"
    head_branch: str | None = None
    base_branch: str | None = None
    extra: dict[str, str] = field(default_factory=dict, compare=False, hash=False)

    def has_label(self, name: str) -> bool:
        return name in self.labels


class Permission(str, Enum):
    """A user's access to a repository, normalised across forges.

    GitHub write/maintain/admin and GitLab Developer (30) or above are `WRITE` or `ADMIN`.
    """

    NONE = "none"
    READ = "read"
    WRITE = "write"
    ADMIN = "admin"

    @property
    def can_write(self) -> bool:
        return self in (Permission.WRITE, Permission.ADMIN)

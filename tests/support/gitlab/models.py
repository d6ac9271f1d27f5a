"""Records of the GitLab testing server's world: users, groups, projects, items, notes,
pipelines and their jobs.

Plain mutable dataclasses: only `GitLabState` changes them, under its lock, and its
readers hand out deep copies.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any, Literal

__all__ = [
    "GUEST",
    "REPORTER",
    "DEVELOPER",
    "MAINTAINER",
    "OWNER",
    "DEFAULT_LABEL_COLOR",
    "ItemKind",
    "normalise_kind",
    "User",
    "Group",
    "Project",
    "Label",
    "Note",
    "Discussion",
    "LabelEvent",
    "Item",
    "Pipeline",
    "Job",
    "pipeline_status",
    "RequestRecord",
    "Clock",
]

GUEST, REPORTER, DEVELOPER, MAINTAINER, OWNER = 10, 20, 30, 40, 50
DEFAULT_LABEL_COLOR = "#6699cc"

ItemKind = Literal["issue", "mr"]

_KIND_ALIASES: dict[str, ItemKind] = {
    "issue": "issue",
    "issues": "issue",
    "mr": "mr",
    "merge_request": "mr",
    "merge_requests": "mr",
}


def normalise_kind(kind: str) -> ItemKind:
    try:
        return _KIND_ALIASES[kind]
    except KeyError:
        raise ValueError(f"unknown item kind {kind!r}: expected 'issue' or 'mr'") from None


@dataclass
class User:
    id: int
    username: str
    name: str
    tokens: set[str]
    created_at: datetime
    bot: bool = False


@dataclass
class Group:
    id: int
    full_path: str
    name: str
    parent_id: int | None
    created_at: datetime
    members: dict[int, int] = field(default_factory=dict)


@dataclass
class Label:
    id: int
    name: str
    color: str
    description: str = ""


@dataclass
class Note:
    id: int
    author_id: int
    body: str
    system: bool
    created_at: datetime
    updated_at: datetime
    kind: ItemKind
    noteable_id: int
    noteable_iid: int
    project_id: int
    discussion_id: str
    type: str | None = None  # None (individual note), "DiscussionNote" or "DiffNote"
    position: dict[str, Any] | None = None


@dataclass
class Discussion:
    id: str
    individual_note: bool
    note_ids: list[int] = field(default_factory=list)


@dataclass
class LabelEvent:
    id: int
    user_id: int
    label_id: int
    label_name: str
    action: Literal["add", "remove"]
    created_at: datetime


@dataclass
class Item:
    """An issue or a merge request: GitLab gives both an `iid` per project and a global `id`."""

    kind: ItemKind
    id: int
    iid: int
    project_id: int
    title: str
    description: str
    author_id: int
    created_at: datetime
    updated_at: datetime
    labels: list[str] = field(default_factory=list)
    assignee_ids: list[int] = field(default_factory=list)
    state: str = "opened"
    closed_at: datetime | None = None
    merged_at: datetime | None = None
    source_branch: str | None = None
    target_branch: str | None = None
    notes: dict[int, Note] = field(default_factory=dict)
    discussions: dict[str, Discussion] = field(default_factory=dict)
    label_events: list[LabelEvent] = field(default_factory=list)
    approved_by: list[int] = field(default_factory=list)  # user ids (`/approve`)
    quick_actions: list[str] = field(default_factory=list)  # the quick actions run on it, in order

    @property
    def draft(self) -> bool:
        lowered = self.title.lower()
        return lowered.startswith(("draft:", "[draft]", "(draft)"))


@dataclass
class Job:
    """A CI job of a pipeline; a retry marks it `retried` and makes a new job of its name."""

    id: int
    project_id: int
    pipeline_id: int
    name: str
    stage: str
    status: str  # created, pending, running, success, failed, canceled, skipped, manual
    created_at: datetime
    allow_failure: bool = False
    trace: bytes = b""
    started_at: datetime | None = None
    finished_at: datetime | None = None
    retried: bool = False
    # What a retry of this job becomes ("success", "failed", "pending"...): a flaky test
    # is a failed job whose retry succeeds.
    on_retry: str = "failed"


@dataclass
class Pipeline:
    id: int
    iid: int
    project_id: int
    sha: str
    ref: str
    source: str  # push, merge_request_event, ...
    created_at: datetime
    updated_at: datetime
    job_ids: list[int] = field(default_factory=list)


_RUNNING = ("running", "pending", "created", "preparing", "waiting_for_resource", "scheduled")


def pipeline_status(jobs: list[Job]) -> str:
    """GitLab's composite status of a pipeline's latest jobs, simplified: running before
    failed before canceled; an allowed failure counts as a success."""
    statuses = {job.status for job in jobs if not job.retried}
    if "running" in statuses:
        return "running"
    for status in _RUNNING[1:]:
        if status in statuses:
            return status
    if any(job.status == "failed" and not job.allow_failure for job in jobs if not job.retried):
        return "failed"
    if "canceled" in statuses:
        return "canceled"
    if "success" in statuses or "failed" in statuses:
        return "success"
    return "manual" if "manual" in statuses else "skipped"


@dataclass
class Project:
    id: int
    path_with_namespace: str
    namespace_id: int
    default_branch: str
    description: str
    created_at: datetime
    members: dict[int, int] = field(default_factory=dict)
    labels: dict[str, Label] = field(default_factory=dict)
    issues: dict[int, Item] = field(default_factory=dict)
    merge_requests: dict[int, Item] = field(default_factory=dict)
    pipelines: dict[int, Pipeline] = field(default_factory=dict)
    jobs: dict[int, Job] = field(default_factory=dict)

    @property
    def path(self) -> str:
        return self.path_with_namespace.rsplit("/", 1)[-1]

    def items(self, kind: ItemKind) -> dict[int, Item]:
        return self.issues if kind == "issue" else self.merge_requests


@dataclass(frozen=True)
class RequestRecord:
    """One request the server answered, for tests and benchmarks that count requests."""

    method: str
    path: str
    query: str
    status: int
    username: str | None
    answered_at: float = field(default_factory=time.monotonic, compare=False)  # for timelines
    bytes_sent: int = field(default=0, compare=False)  # the answer's Content-Length

    @property
    def not_modified(self) -> bool:
        return self.status == 304


class Clock:
    """Strictly increasing UTC timestamps (millisecond steps), so ordering by time is total."""

    def __init__(self) -> None:
        self._last = datetime.now(UTC).replace(microsecond=0)

    def now(self) -> datetime:
        current = datetime.now(UTC)
        current = current.replace(microsecond=current.microsecond // 1000 * 1000)
        if current <= self._last:
            current = self._last + timedelta(milliseconds=1)
        self._last = current
        return current

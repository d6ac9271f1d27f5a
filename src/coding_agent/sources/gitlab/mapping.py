"""GitLab's JSON (issues, merge requests, notes, members, pipelines, jobs) mapped to the
domain's types.

No I/O here: what an answer means for a `Task`, a `Comment`, a `ChangeRequest`, a
`Permission` or a `Check`, and the API paths of an item.
"""

from __future__ import annotations

import re
from datetime import datetime
from typing import Any
from urllib.parse import quote

from coding_agent.domain.ci import Check, CheckKind, CheckState
from coding_agent.domain.delivery import ChangeRequest
from coding_agent.domain.tasks import Comment, Permission, Task, TaskKey, TaskKind, canonical_project
from coding_agent.errors import ForgeError
from coding_agent.sources.gitlab.quick_actions import restore_quick_actions
from coding_agent.sources.writes import strip_marker

__all__ = [
    "JSON",
    "MAX_BODY_LENGTH",
    "THREAD_NOTE_TYPES",
    "assignees",
    "chronological",
    "job_checks",
    "newest_pipelines",
    "ready_title",
    "instance_url",
    "item_path",
    "permission_for_access_level",
    "project_ref",
    "to_change",
    "to_comment",
    "to_task",
    "touched_since",
]

JSON = dict[str, Any]

# GitLab refuses a note longer than this ("Note is too long (maximum is 1000000 characters)").
MAX_BODY_LENGTH = 1_000_000
THREAD_NOTE_TYPES = ("DiscussionNote", "DiffNote")
_STATES = {"opened": "open"}


def instance_url(api_url: str) -> str:
    """`https://gitlab.example.com/api/v4/` -> `https://gitlab.example.com` (python-gitlab adds /api/v4)."""
    url = api_url.strip().rstrip("/")
    return url.removesuffix("/api/v4").rstrip("/")


def permission_for_access_level(level: int | None) -> Permission:
    """GitLab access levels: Maintainer (40) and Owner (50) admin, Developer (30) write, Guest/Reporter read."""
    if level is None:
        return Permission.NONE
    if level >= 40:
        return Permission.ADMIN
    if level >= 30:
        return Permission.WRITE
    if level >= 10:
        return Permission.READ
    return Permission.NONE


def _parse_time(value: str) -> datetime:
    return datetime.fromisoformat(value.replace("Z", "+00:00"))


def _route(kind: TaskKind) -> str:
    return "issues" if kind is TaskKind.ISSUE else "merge_requests"


def project_path(data: JSON) -> str:
    """`group/project` of an issue/MR, from `references.full` (or `web_url`): listings lack the path."""
    full = (data.get("references") or {}).get("full")
    if full:
        for sign in ("#", "!"):
            if sign in full:
                return full.rsplit(sign, 1)[0]
    web_url = str(data.get("web_url", ""))
    if "/-/" in web_url:
        return web_url.split("/-/", 1)[0].split("://", 1)[-1].split("/", 1)[1]
    raise ForgeError(f"gitlab item {data.get('id')} carries neither references.full nor web_url")


def assignees(data: JSON) -> list[str]:
    names = [user["username"] for user in data.get("assignees") or [] if user]
    if not names and data.get("assignee"):
        names = [data["assignee"]["username"]]
    return names


def to_comment(note: JSON, thread_id: str | None = None) -> Comment:
    """A note as the domain sees it: without our hidden marker and quick-action joiners."""
    return Comment(
        id=str(note["id"]),
        author=(note.get("author") or {}).get("username", ""),
        body=restore_quick_actions(strip_marker(note.get("body") or "")),
        created_at=_parse_time(note["created_at"]),
        thread_id=thread_id,
    )


def touched_since(note: JSON, since: datetime) -> bool:
    """Was `note` created or edited at or after `since` (GitHub's `since`, for a note)?"""
    return _parse_time(note.get("updated_at") or note["created_at"]) >= since


def chronological(notes: list[JSON]) -> list[JSON]:
    return sorted(notes, key=lambda note: (note["created_at"], note["id"]))


def project_ref(project: str) -> str:
    """A project (its numeric id, or its canonical path) as one URL path segment: the
    path's slashes encoded, as GitLab's API wants. A ForgeError names a path that is not
    canonical (a `..` segment, an escape: SPEC 15), before any request."""
    if not (project.isascii() and project.isdigit()):
        try:
            canonical_project("gitlab", project)
        except ValueError as error:
            raise ForgeError(str(error)) from None
    return quote(project, safe="")


def item_path(key: TaskKey) -> str:
    if key.forge != "gitlab":
        raise ValueError(f"{key} is not a GitLab task")
    return f"/projects/{project_ref(key.project)}/{_route(key.kind)}/{key.number}"


def to_task(data: JSON, kind: TaskKind) -> Task:
    """An issue or merge request as a `Task` (listings lack the project path: see `project_path`)."""
    extra = {"id": str(data["id"]), "project_id": str(data.get("project_id", ""))}
    if kind is TaskKind.CHANGE:
        extra["draft"] = str(bool(data.get("draft"))).lower()
        extra["source_project_id"] = str(data.get("source_project_id", ""))
    return Task(
        key=TaskKey("gitlab", project_path(data), kind, int(data["iid"])),
        title=restore_quick_actions(data.get("title") or ""),
        body=restore_quick_actions(data.get("description") or ""),
        author=(data.get("author") or {}).get("username", ""),
        labels=tuple(data.get("labels") or ()),
        assignees=tuple(assignees(data)),
        url=data.get("web_url") or "",
        created_at=_parse_time(data["created_at"]),
        updated_at=_parse_time(data["updated_at"]),
        state=_STATES.get(str(data.get("state")), str(data.get("state"))),
        head_branch=data.get("source_branch"),
        base_branch=data.get("target_branch"),
        extra=extra,
    )


def to_change(data: JSON) -> ChangeRequest:
    return ChangeRequest(
        number=int(data["iid"]),
        url=str(data.get("web_url") or ""),
        head_branch=str(data.get("source_branch") or ""),
        base_branch=str(data.get("target_branch") or ""),
        body=restore_quick_actions(str(data.get("description") or "")),
        draft=bool(data.get("draft") or data.get("work_in_progress")),
        head_sha=str(data["sha"]) if data.get("sha") else None,
    )


# GitLab's draft marks, as its own `draftless_title` strips them (`WIP:` went in 14.0).
_DRAFT_PREFIX = re.compile(r"\A\s*(?:\[draft\]|\(draft\)|draft:)\s*", re.IGNORECASE)


def ready_title(title: str) -> str:
    """An MR title without its draft marks: GitLab has no draft flag to write, the title is it."""
    while (match := _DRAFT_PREFIX.match(title)) is not None:
        title = title[match.end() :]
    return title


# A job's status folded into the three states (SPEC 16). `manual` and `skipped` jobs are
# left out of the report: a manual job waits for a person (a deploy button), and counting
# it as pending would hold the watch until `ci.watch_seconds`; a skipped job never ran.
# A status GitLab adds later counts as pending: the watch waits rather than guesses.
_JOB_STATES = {
    "success": CheckState.PASSED,
    "failed": CheckState.FAILED,
    "canceled": CheckState.FAILED,
}
_NOT_COUNTED = frozenset({"manual", "skipped"})


def newest_pipelines(pipelines: list[JSON]) -> list[JSON]:
    """The newest pipeline of each `source` (push, merge_request_event, parent_pipeline...):
    an older pipeline of the same source was superseded, another source's still counts."""
    newest: dict[str, JSON] = {}
    for pipeline in sorted(pipelines, key=lambda p: int(p.get("id") or 0), reverse=True):
        newest.setdefault(str(pipeline.get("source") or ""), pipeline)
    return list(newest.values())


def job_checks(jobs: list[JSON]) -> list[Check]:
    """A pipeline's jobs as checks, the newest job of each name only (a retried job is
    listed again under a new id), manual and skipped jobs left out."""
    latest: dict[str, JSON] = {}
    for job in sorted(jobs, key=lambda j: int(j.get("id") or 0)):
        latest[str(job.get("name") or job.get("id"))] = job
    return [_job_check(job) for job in latest.values() if job.get("status") not in _NOT_COUNTED]


def _job_check(job: JSON) -> Check:
    status = str(job.get("status") or "")
    state = _JOB_STATES.get(status, CheckState.PENDING)
    conclusion = status
    if state is CheckState.FAILED and status == "failed" and job.get("allow_failure"):
        state, conclusion = CheckState.PASSED, "failed (allowed to fail)"
    return Check(
        id=str(job["id"]),
        name=str(job.get("name") or job["id"]),
        kind=CheckKind.GITLAB_JOB,
        state=state,
        conclusion=conclusion,
        url=str(job["web_url"]) if job.get("web_url") else None,
        rerun_id=str(job["id"]),
    )

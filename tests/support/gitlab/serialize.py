"""GitLab API v4 JSON shapes of the testing server's records.

The shapes follow GitLab's documented responses closely enough that python-gitlab (and
code reading `references`, `web_url`, `assignee`, `position`...) gets what a real
instance would send. URLs are built from the base URL the client used, so links work
whatever port the server landed on. Callers hold the state lock.
"""

from __future__ import annotations

from datetime import datetime
from typing import TYPE_CHECKING, Any

from tests.support.gitlab.models import Discussion, Group, Item, Label, LabelEvent, Note, Project, User

if TYPE_CHECKING:  # the state's CI part builds webhook payloads with these shapes
    from tests.support.gitlab.state import GitLabState

__all__ = [
    "timestamp",
    "user_basic",
    "user_full",
    "group_json",
    "project_json",
    "issue_json",
    "merge_request_json",
    "item_json",
    "note_json",
    "discussion_json",
    "label_json",
    "label_event_json",
    "member_json",
]

JSON = dict[str, Any]


def timestamp(value: datetime | None) -> str | None:
    """ISO 8601 with milliseconds and `Z`, as GitLab writes it."""
    if value is None:
        return None
    return value.strftime("%Y-%m-%dT%H:%M:%S.") + f"{value.microsecond // 1000:03d}Z"


def user_basic(user: User, base: str) -> JSON:
    return {
        "id": user.id,
        "username": user.username,
        "name": user.name,
        "state": "active",
        "locked": False,
        "avatar_url": None,
        "web_url": f"{base}/{user.username}",
    }


def user_full(user: User, base: str) -> JSON:
    return {
        **user_basic(user, base),
        "created_at": timestamp(user.created_at),
        "bio": "",
        "bot": user.bot,
        "public_email": None,
        "email": f"{user.username}@example.test",
        "is_admin": user.username == "root",
    }


def group_json(group: Group, base: str) -> JSON:
    return {
        "id": group.id,
        "name": group.name,
        "path": group.full_path.rsplit("/", 1)[-1],
        "full_name": group.full_path.replace("/", " / "),
        "full_path": group.full_path,
        "parent_id": group.parent_id,
        "visibility": "private",
        "web_url": f"{base}/groups/{group.full_path}",
        "created_at": timestamp(group.created_at),
        "description": "",
    }


def project_json(state: GitLabState, project: Project, base: str) -> JSON:
    namespace = state.groups[project.namespace_id]
    host = base.split("://", 1)[-1]
    return {
        "id": project.id,
        "description": project.description,
        "name": project.path,
        "name_with_namespace": project.path_with_namespace.replace("/", " / "),
        "path": project.path,
        "path_with_namespace": project.path_with_namespace,
        "created_at": timestamp(project.created_at),
        "default_branch": project.default_branch,
        "ssh_url_to_repo": f"git@{host}:{project.path_with_namespace}.git",
        "http_url_to_repo": f"{base}/{project.path_with_namespace}.git",
        "web_url": f"{base}/{project.path_with_namespace}",
        "visibility": "private",
        "archived": False,
        "namespace": {
            "id": namespace.id,
            "name": namespace.name,
            "path": namespace.full_path.rsplit("/", 1)[-1],
            "kind": "group",
            "full_path": namespace.full_path,
            "parent_id": namespace.parent_id,
            "web_url": f"{base}/groups/{namespace.full_path}",
        },
        "issues_enabled": True,
        "merge_requests_enabled": True,
        "open_issues_count": sum(1 for item in project.issues.values() if item.state == "opened"),
    }


def _item_common(state: GitLabState, item: Item, base: str) -> JSON:
    project = state.projects[item.project_id]
    sign, route = ("#", "issues") if item.kind == "issue" else ("!", "merge_requests")
    assignees = [user_basic(state.users[uid], base) for uid in item.assignee_ids]
    return {
        "id": item.id,
        "iid": item.iid,
        "project_id": item.project_id,
        "title": item.title,
        "description": item.description,
        "state": item.state,
        "created_at": timestamp(item.created_at),
        "updated_at": timestamp(item.updated_at),
        "closed_at": timestamp(item.closed_at),
        "closed_by": None,
        "labels": list(item.labels),
        "milestone": None,
        "author": user_basic(state.users[item.author_id], base),
        "assignees": assignees,
        "assignee": assignees[0] if assignees else None,
        "user_notes_count": sum(1 for note in item.notes.values() if not note.system),
        "upvotes": 0,
        "downvotes": 0,
        "discussion_locked": None,
        "web_url": f"{base}/{project.path_with_namespace}/-/{route}/{item.iid}",
        "references": {
            "short": f"{sign}{item.iid}",
            "relative": f"{sign}{item.iid}",
            "full": f"{project.path_with_namespace}{sign}{item.iid}",
        },
        "time_stats": {
            "time_estimate": 0,
            "total_time_spent": 0,
            "human_time_estimate": None,
            "human_total_time_spent": None,
        },
        "task_completion_status": {"count": 0, "completed_count": 0},
    }


def issue_json(state: GitLabState, item: Item, base: str) -> JSON:
    return {
        **_item_common(state, item, base),
        "type": "ISSUE",
        "issue_type": "issue",
        "confidential": False,
        "due_date": None,
        "merge_requests_count": 0,
        "has_tasks": False,
        "severity": "UNKNOWN",
        "moved_to_id": None,
        "service_desk_reply_to": None,
    }


def merge_request_json(state: GitLabState, item: Item, base: str) -> JSON:
    # The source branch's head commit, as GitLab reports it (the CI watch compares it).
    sha = state.branches(item.project_id).get(item.source_branch or "")
    return {
        **_item_common(state, item, base),
        "merged_by": None,
        "merged_at": timestamp(item.merged_at),
        "target_branch": item.target_branch,
        "source_branch": item.source_branch,
        "source_project_id": item.project_id,
        "target_project_id": item.project_id,
        "reviewers": [],
        "draft": item.draft,
        "work_in_progress": item.draft,
        "merge_when_pipeline_succeeds": False,
        "merge_status": "can_be_merged",
        "detailed_merge_status": "mergeable",
        "sha": sha,
        "merge_commit_sha": None,
        "squash_commit_sha": None,
        "should_remove_source_branch": None,
        "force_remove_source_branch": False,
        "reference": f"!{item.iid}",
        "squash": False,
        "has_conflicts": False,
        "blocking_discussions_resolved": True,
    }


def item_json(state: GitLabState, item: Item, base: str) -> JSON:
    return issue_json(state, item, base) if item.kind == "issue" else merge_request_json(state, item, base)


def note_json(state: GitLabState, note: Note, base: str) -> JSON:
    resolvable = note.type in ("DiscussionNote", "DiffNote") and note.kind == "mr"
    data: JSON = {
        "id": note.id,
        "type": note.type,
        "body": note.body,
        "attachment": None,
        "author": user_basic(state.users[note.author_id], base),
        "created_at": timestamp(note.created_at),
        "updated_at": timestamp(note.updated_at),
        "system": note.system,
        "noteable_id": note.noteable_id,
        "noteable_type": "Issue" if note.kind == "issue" else "MergeRequest",
        "project_id": note.project_id,
        "noteable_iid": note.noteable_iid,
        "resolvable": resolvable,
        "confidential": False,
        "internal": False,
        "commands_changes": {},
    }
    if resolvable:
        data.update({"resolved": False, "resolved_by": None, "resolved_at": None})
    if note.position is not None:
        data["position"] = note.position
    return data


def discussion_json(state: GitLabState, item: Item, discussion: Discussion, base: str) -> JSON:
    return {
        "id": discussion.id,
        "individual_note": discussion.individual_note,
        "notes": [note_json(state, item.notes[note_id], base) for note_id in discussion.note_ids],
    }


def label_json(project: Project, label: Label) -> JSON:
    def count(kind: str, state: str) -> int:
        items = project.issues if kind == "issue" else project.merge_requests
        return sum(1 for item in items.values() if item.state == state and label.name in item.labels)

    return {
        "id": label.id,
        "name": label.name,
        "color": label.color,
        "text_color": "#FFFFFF",
        "description": label.description or None,
        "description_html": label.description,
        "open_issues_count": count("issue", "opened"),
        "closed_issues_count": count("issue", "closed"),
        "open_merge_requests_count": count("mr", "opened"),
        "subscribed": False,
        "priority": None,
        "is_project_label": True,
    }


def label_event_json(state: GitLabState, item: Item, event: LabelEvent, base: str) -> JSON:
    project = state.projects[item.project_id]
    label = project.labels.get(event.label_name)
    return {
        "id": event.id,
        "user": user_basic(state.users[event.user_id], base),
        "created_at": timestamp(event.created_at),
        "resource_type": "Issue" if item.kind == "issue" else "MergeRequest",
        "resource_id": item.id,
        "label": label_json(project, label) if label is not None else {"id": event.label_id, "name": event.label_name},
        "action": event.action,
    }


def member_json(user: User, level: int, base: str) -> JSON:
    return {
        **user_basic(user, base),
        "access_level": level,
        "created_at": timestamp(user.created_at),
        "expires_at": None,
        "membership_state": "active",
    }

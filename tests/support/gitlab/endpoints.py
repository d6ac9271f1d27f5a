"""The API v4 endpoints of the GitLab testing server, one small function each: the
lookups every endpoint makes, and the endpoints of users, groups, projects, labels and
members. Those of issues and merge requests are item_endpoints.py, those of notes and
discussions note_endpoints.py; app.py routes to them all.

Every handler runs under the state lock with a `Call` (decoded path parameters, merged
query/body parameters, the authenticated user) and returns a response. They raise
`ApiError` for GitLab's error answers (404, 400, 403, 409).
"""

from __future__ import annotations

import base64
from collections.abc import Callable
from typing import Any

from starlette.responses import Response

from tests.support.gitlab import serialize as js
from tests.support.gitlab.models import Discussion, Group, Item, ItemKind, Note, Project
from tests.support.gitlab.state import GitLabState
from tests.support.gitlab.web import ApiError, Call, as_list, json_response, not_found, paginated

__all__ = [
    "Handler",
    "project_of",
    "group_of",
    "kind_of",
    "item_of",
    "note_of",
    "discussion_of",
    "require_params",
    "user_ids",
    "current_user",
    "list_users",
    "get_group",
    "get_project",
    "get_repository_file",
    "list_label_events",
    "list_labels",
    "create_label",
    "list_members_all",
    "get_member_all",
]

Handler = Callable[[GitLabState, Call], Response]

_KINDS: dict[str, ItemKind] = {"issues": "issue", "merge_requests": "mr"}


# -- lookups ---------------------------------------------------------------------------


def project_of(state: GitLabState, call: Call) -> Project:
    project = state.find_project(call.path_params["pid"])
    if project is None:
        raise not_found("Project")
    return project


def group_of(state: GitLabState, call: Call) -> Group:
    group = state.find_group(call.path_params["gid"])
    if group is None:
        raise not_found("Group")
    return group


def kind_of(call: Call) -> ItemKind:
    return _KINDS[call.path_params["kind"]]


def item_of(state: GitLabState, call: Call) -> Item:
    project = project_of(state, call)
    iid = call.path_params["iid"]
    item = project.items(kind_of(call)).get(int(iid)) if iid.isdigit() else None
    if item is None:
        raise not_found("Issue" if kind_of(call) == "issue" else "Merge Request")
    return item


def note_of(item: Item, call: Call) -> Note:
    note_id = call.path_params["nid"]
    note = item.notes.get(int(note_id)) if note_id.isdigit() else None
    if note is None:
        raise not_found("Note")
    return note


def discussion_of(item: Item, call: Call) -> Discussion:
    discussion = item.discussions.get(call.path_params["did"])
    if discussion is None:
        raise not_found("Discussion")
    return discussion


def require_params(call: Call, *names: str) -> None:
    for name in names:
        value = call.params.get(name)
        if value is None or (isinstance(value, str) and not value.strip()):
            raise ApiError(400, f"{name} is missing", key="error")


def user_ids(state: GitLabState, value: Any) -> list[int]:
    """`assignee_ids` as GitLab reads it: a list, a comma string, or 0/"" to clear."""
    raw = value if isinstance(value, list) else as_list(value)
    ids = [int(item) for item in raw if str(item).strip() not in ("", "0")]
    unknown = [uid for uid in ids if uid not in state.users]
    if unknown:
        raise ApiError(404, "404 User Not Found")
    return ids


# -- users and groups ---------------------------------------------------------------


def current_user(state: GitLabState, call: Call) -> Response:
    return json_response(call.request, js.user_full(call.user, call.base_url))


def current_token(state: GitLabState, call: Call) -> Response:
    """`GET /personal_access_tokens/self`: the calling token's own record (GitLab 15.5+)."""
    headers = call.request.headers
    token = headers.get("private-token") or headers.get("authorization", "")[7:].strip()
    payload = {
        "id": abs(hash(token)) % 100000,
        "name": "coding-agent",
        "revoked": False,
        "created_at": "2026-01-01T00:00:00.000Z",
        "scopes": ["api"],
        "user_id": call.user.id,
        "active": True,
        "expires_at": state.token_expiries.get(token),
    }
    return json_response(call.request, payload)


def list_users(state: GitLabState, call: Call) -> Response:
    username = call.params.get("username")
    users = [user for user in state.users.values() if username is None or user.username == username]
    return paginated(call, [js.user_basic(user, call.base_url) for user in users])


def get_group(state: GitLabState, call: Call) -> Response:
    return json_response(call.request, js.group_json(group_of(state, call), call.base_url))


# -- projects ----------------------------------------------------------------------------


def get_project(state: GitLabState, call: Call) -> Response:
    return json_response(call.request, js.project_json(state, project_of(state, call), call.base_url))


def get_repository_file(state: GitLabState, call: Call) -> Response:
    """`GET /projects/:id/repository/files/:path?ref=`: the file's content, base64."""
    project = project_of(state, call)
    path = call.path_params["file_path"]
    ref = call.query.get("ref") or project.default_branch
    data = state.git.read_file(project.path_with_namespace, ref, path)
    if data is None:
        raise not_found("File")
    body = {"file_name": path.rsplit("/", 1)[-1], "file_path": path, "size": len(data), "encoding": "base64",
            "content": base64.b64encode(data).decode(), "ref": ref}  # fmt: skip
    return json_response(call.request, body)


# -- labels, label events, members ------------------------------------------------------


def list_label_events(state: GitLabState, call: Call) -> Response:
    item = item_of(state, call)
    return paginated(call, [js.label_event_json(state, item, event, call.base_url) for event in item.label_events])


def list_labels(state: GitLabState, call: Call) -> Response:
    project = project_of(state, call)
    search = str(call.params.get("search", "")).lower()
    labels = sorted(project.labels.values(), key=lambda label: label.name.lower())
    return paginated(call, [js.label_json(project, label) for label in labels if search in label.name.lower()])


def create_label(state: GitLabState, call: Call) -> Response:
    project = project_of(state, call)
    require_params(call, "name", "color")
    name = str(call.params["name"])
    if name in project.labels:
        raise ApiError(409, "Label already exists")
    label = state.create_label(project.id, name, str(call.params["color"]), str(call.params.get("description") or ""))
    return json_response(call.request, js.label_json(project, label), status=201)


def list_members_all(state: GitLabState, call: Call) -> Response:
    project = project_of(state, call)
    members = []
    for user in state.users.values():
        level = state.access_level(project.id, user.id)
        if level is not None:
            members.append(js.member_json(user, level, call.base_url))
    return paginated(call, members)


def get_member_all(state: GitLabState, call: Call) -> Response:
    project = project_of(state, call)
    user_id = call.path_params["uid"]
    user = state.users.get(int(user_id)) if user_id.isdigit() else None
    level = state.access_level(project.id, user.id) if user is not None else None
    if user is None or level is None:
        raise not_found()
    return json_response(call.request, js.member_json(user, level, call.base_url))

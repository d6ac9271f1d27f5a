"""The API v4 endpoints of the GitLab testing server, one small function each.

Every handler runs under the state lock with a `Call` (decoded path parameters, merged
query/body parameters, the authenticated user) and returns a response. They raise
`ApiError` for GitLab's error answers (404, 400, 403, 409).
"""

from __future__ import annotations

import base64
from collections.abc import Callable
from datetime import datetime, timezone
from typing import Any

from starlette.responses import Response

from coding_agent.testing.gitlab import serialize as js
from coding_agent.testing.gitlab.models import Discussion, Group, Item, ItemKind, Note, Project
from coding_agent.testing.gitlab.state import GitLabState
from coding_agent.testing.gitlab.web import ApiError, Call, as_list, json_response, not_found, paginated

__all__ = ["ROUTES", "Handler"]

Handler = Callable[[GitLabState, Call], Response]

_KINDS: dict[str, ItemKind] = {"issues": "issue", "merge_requests": "mr"}


# -- lookups ---------------------------------------------------------------------------


def _project(state: GitLabState, call: Call) -> Project:
    project = state.find_project(call.path_params["pid"])
    if project is None:
        raise not_found("Project")
    return project


def _group(state: GitLabState, call: Call) -> Group:
    group = state.find_group(call.path_params["gid"])
    if group is None:
        raise not_found("Group")
    return group


def _kind(call: Call) -> ItemKind:
    return _KINDS[call.path_params["kind"]]


def _item(state: GitLabState, call: Call) -> Item:
    project = _project(state, call)
    iid = call.path_params["iid"]
    item = project.items(_kind(call)).get(int(iid)) if iid.isdigit() else None
    if item is None:
        raise not_found("Issue" if _kind(call) == "issue" else "Merge Request")
    return item


def _note(item: Item, call: Call) -> Note:
    note_id = call.path_params["nid"]
    note = item.notes.get(int(note_id)) if note_id.isdigit() else None
    if note is None:
        raise not_found("Note")
    return note


def _discussion(item: Item, call: Call) -> Discussion:
    discussion = item.discussions.get(call.path_params["did"])
    if discussion is None:
        raise not_found("Discussion")
    return discussion


def _required(call: Call, *names: str) -> None:
    for name in names:
        value = call.params.get(name)
        if value is None or (isinstance(value, str) and not value.strip()):
            raise ApiError(400, f"{name} is missing", key="error")


def _user_ids(state: GitLabState, value: Any) -> list[int]:
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


def list_users(state: GitLabState, call: Call) -> Response:
    username = call.params.get("username")
    users = [user for user in state.users.values() if username is None or user.username == username]
    return paginated(call, [js.user_basic(user, call.base_url) for user in users])


def get_group(state: GitLabState, call: Call) -> Response:
    return json_response(call.request, js.group_json(_group(state, call), call.base_url))


# -- listing issues and merge requests ----------------------------------------------


def _timestamp(value: str) -> datetime:
    """An ISO 8601 query parameter (`updated_after`); a naive one is UTC, as GitLab reads it."""
    try:
        moment = datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        raise ApiError(400, f"{value!r} is not an ISO 8601 time") from None
    return moment if moment.tzinfo else moment.replace(tzinfo=timezone.utc)


def _matches(state: GitLabState, call: Call, item: Item) -> bool:
    params = call.params
    wanted_state = params.get("state", "all")
    if wanted_state != "all" and item.state != wanted_state:
        return False
    labels = params.get("labels")
    if labels is not None:
        names = as_list(labels)
        if names == ["None"]:
            if item.labels:
                return False
        elif names == ["Any"]:
            if not item.labels:
                return False
        elif any(name not in item.labels for name in names):
            return False
    assignees = {state.users[uid].username for uid in item.assignee_ids}
    if "assignee_username" in params and not set(as_list(params["assignee_username"])) <= assignees:
        return False
    assignee_id = params.get("assignee_id")
    if assignee_id is not None:
        if str(assignee_id) == "None" and item.assignee_ids:
            return False
        if str(assignee_id) == "Any" and not item.assignee_ids:
            return False
        if str(assignee_id).isdigit() and int(assignee_id) not in item.assignee_ids:
            return False
    if "author_username" in params and state.users[item.author_id].username != params["author_username"]:
        return False
    scope = params.get("scope", "all")
    if scope == "created_by_me" and item.author_id != call.user.id:
        return False
    if scope == "assigned_to_me" and call.user.id not in item.assignee_ids:
        return False
    for branch in ("source_branch", "target_branch"):
        if branch in params and getattr(item, branch) != params[branch]:
            return False
    if "updated_after" in params and item.updated_at < _timestamp(str(params["updated_after"])):
        return False
    iids = params.get("iids")
    return iids is None or str(item.iid) in {str(value) for value in as_list(iids)}


def _listing(state: GitLabState, call: Call, projects: list[Project], kind: ItemKind) -> Response:
    items = [item for project in projects for item in project.items(kind).values() if _matches(state, call, item)]
    order_by = call.params.get("order_by", "created_at")
    order_by = order_by if order_by in ("created_at", "updated_at") else "created_at"
    descending = call.params.get("sort", "desc") != "asc"
    items.sort(key=lambda item: (getattr(item, order_by), item.id), reverse=descending)
    return paginated(call, [js.item_json(state, item, call.base_url) for item in items])


def list_group_items(state: GitLabState, call: Call) -> Response:
    return _listing(state, call, state.projects_in_group(_group(state, call)), _kind(call))


def list_project_items(state: GitLabState, call: Call) -> Response:
    return _listing(state, call, [_project(state, call)], _kind(call))


# -- projects, issues and merge requests ------------------------------------------


def get_project(state: GitLabState, call: Call) -> Response:
    return json_response(call.request, js.project_json(state, _project(state, call), call.base_url))


def get_repository_file(state: GitLabState, call: Call) -> Response:
    """`GET /projects/:id/repository/files/:path?ref=`: the file's content, base64."""
    project = _project(state, call)
    path = call.path_params["file_path"]
    ref = call.query.get("ref") or project.default_branch
    data = state.git.read_file(project.path_with_namespace, ref, path)
    if data is None:
        raise not_found("File")
    body = {"file_name": path.rsplit("/", 1)[-1], "file_path": path, "size": len(data), "encoding": "base64",
            "content": base64.b64encode(data).decode(), "ref": ref}  # fmt: skip
    return json_response(call.request, body)


def create_item(state: GitLabState, call: Call) -> Response:
    project = _project(state, call)
    kind = _kind(call)
    params = call.params
    if kind == "mr":
        _required(call, "source_branch", "target_branch", "title")
        clash = next(
            (
                other
                for other in project.merge_requests.values()
                if other.state == "opened" and other.source_branch == params["source_branch"]
            ),
            None,
        )
        if clash is not None:
            message = f"Another open merge request already exists for this source branch: !{clash.iid}"
            raise ApiError(409, [message])
        branches = state.branches(project.id)
        for field in ("source_branch", "target_branch"):
            if params[field] not in branches:
                raise ApiError(400, [f"Invalid {field.replace('_', ' ')}: {params[field]} does not exist"])
    else:
        _required(call, "title")
    assignees = [state.users[uid].username for uid in _user_ids(state, params.get("assignee_ids", []))]
    title = str(params["title"])
    description = str(params.get("description") or "")
    labels = as_list(params.get("labels"))
    author = call.user.username
    if kind == "mr":
        iid = state.create_merge_request(
            project.id,
            title,
            description,
            author,
            source_branch=str(params["source_branch"]),
            target_branch=str(params["target_branch"]),
            labels=labels,
            assignees=assignees,
        )
    else:
        iid = state.create_issue(project.id, title, description, author, labels=labels, assignees=assignees)
    item = project.items(kind)[iid]
    return json_response(call.request, js.item_json(state, item, call.base_url), status=201)


def get_item(state: GitLabState, call: Call) -> Response:
    return json_response(call.request, js.item_json(state, _item(state, call), call.base_url))


def update_item(state: GitLabState, call: Call) -> Response:
    """PUT: fields, `labels` (replace), `add_labels`/`remove_labels` (single writes), assignees, state."""
    item = _item(state, call)
    params = call.params
    actor = call.user.id
    touched = False
    for field in ("title", "description") + (("target_branch",) if item.kind == "mr" else ()):
        if field in params and params[field] is not None:
            setattr(item, field, str(params[field]))
            touched = True
    if "labels" in params:
        state.set_labels(item, as_list(params["labels"]), actor)
    if "add_labels" in params or "remove_labels" in params:
        state.change_labels(item, as_list(params.get("add_labels")), as_list(params.get("remove_labels")), actor)
    if "assignee_ids" in params:
        state.set_assignees(item, _user_ids(state, params["assignee_ids"]), actor)
    elif "assignee_id" in params:
        state.set_assignees(item, _user_ids(state, params["assignee_id"]), actor)
    event = params.get("state_event")
    if event in ("close", "reopen"):
        state.apply_state(item, "closed" if event == "close" else "opened")
    elif event is not None:
        raise ApiError(400, "state_event does not have a valid value", key="error")
    if touched:
        item.updated_at = state.clock.now()
    return json_response(call.request, js.item_json(state, item, call.base_url))


# -- notes ------------------------------------------------------------------------------


def list_notes(state: GitLabState, call: Call) -> Response:
    """GitLab's default order is newest first by `created_at`; `sort`/`order_by` change it."""
    item = _item(state, call)
    order_by = call.params.get("order_by", "created_at")
    order_by = order_by if order_by in ("created_at", "updated_at") else "created_at"
    descending = call.params.get("sort", "desc") != "asc"
    notes = sorted(item.notes.values(), key=lambda note: (getattr(note, order_by), note.id), reverse=descending)
    return paginated(call, [js.note_json(state, note, call.base_url) for note in notes])


def get_note(state: GitLabState, call: Call) -> Response:
    note = _note(_item(state, call), call)
    return json_response(call.request, js.note_json(state, note, call.base_url))


def create_note(state: GitLabState, call: Call) -> Response:
    _required(call, "body")
    note = state.post_note(_item(state, call), call.user.id, str(call.params["body"]))
    return json_response(call.request, js.note_json(state, note, call.base_url), status=201)


def update_note(state: GitLabState, call: Call) -> Response:
    _required(call, "body")
    note = _note(_item(state, call), call)
    if note.author_id != call.user.id and call.user.username != "root":
        raise ApiError(403, "403 Forbidden")
    state.edit_note(note, str(call.params["body"]))
    return json_response(call.request, js.note_json(state, note, call.base_url))


# -- discussions ------------------------------------------------------------------------


def list_discussions(state: GitLabState, call: Call) -> Response:
    item = _item(state, call)
    data = [js.discussion_json(state, item, discussion, call.base_url) for discussion in item.discussions.values()]
    return paginated(call, data)


def get_discussion(state: GitLabState, call: Call) -> Response:
    item = _item(state, call)
    return json_response(call.request, js.discussion_json(state, item, _discussion(item, call), call.base_url))


def create_discussion(state: GitLabState, call: Call) -> Response:
    _required(call, "body")
    item = _item(state, call)
    position = call.params.get("position")
    if position is not None and not isinstance(position, dict):
        raise ApiError(400, "position is invalid", key="error")
    discussion = state.start_discussion(item, call.user.id, str(call.params["body"]), position)
    return json_response(call.request, js.discussion_json(state, item, discussion, call.base_url), status=201)


def reply_discussion(state: GitLabState, call: Call) -> Response:
    _required(call, "body")
    item = _item(state, call)
    note = state.reply(item, _discussion(item, call), call.user.id, str(call.params["body"]))
    return json_response(call.request, js.note_json(state, note, call.base_url), status=201)


# -- labels, label events, members ------------------------------------------------------


def list_label_events(state: GitLabState, call: Call) -> Response:
    item = _item(state, call)
    return paginated(call, [js.label_event_json(state, item, event, call.base_url) for event in item.label_events])


def list_labels(state: GitLabState, call: Call) -> Response:
    project = _project(state, call)
    search = str(call.params.get("search", "")).lower()
    labels = sorted(project.labels.values(), key=lambda label: label.name.lower())
    return paginated(call, [js.label_json(project, label) for label in labels if search in label.name.lower()])


def create_label(state: GitLabState, call: Call) -> Response:
    project = _project(state, call)
    _required(call, "name", "color")
    name = str(call.params["name"])
    if name in project.labels:
        raise ApiError(409, "Label already exists")
    label = state.create_label(project.id, name, str(call.params["color"]), str(call.params.get("description") or ""))
    return json_response(call.request, js.label_json(project, label), status=201)


def list_members_all(state: GitLabState, call: Call) -> Response:
    project = _project(state, call)
    members = []
    for user in state.users.values():
        level = state.access_level(project.id, user.id)
        if level is not None:
            members.append(js.member_json(user, level, call.base_url))
    return paginated(call, members)


def get_member_all(state: GitLabState, call: Call) -> Response:
    project = _project(state, call)
    user_id = call.path_params["uid"]
    user = state.users.get(int(user_id)) if user_id.isdigit() else None
    level = state.access_level(project.id, user.id) if user is not None else None
    if user is None or level is None:
        raise not_found()
    return json_response(call.request, js.member_json(user, level, call.base_url))


_P = "/projects/{pid}"
_I = _P + "/{kind}/{iid}"

ROUTES: list[tuple[str, str, Handler]] = [
    ("GET", "/user", current_user),
    ("GET", "/users", list_users),
    ("GET", "/groups/{gid}", get_group),
    ("GET", "/groups/{gid}/{kind}", list_group_items),
    ("GET", _P, get_project),
    ("GET", _P + "/repository/files/{file_path}", get_repository_file),
    ("GET", _P + "/{kind}", list_project_items),
    ("POST", _P + "/{kind}", create_item),
    ("GET", _I, get_item),
    ("PUT", _I, update_item),
    ("GET", _I + "/notes", list_notes),
    ("POST", _I + "/notes", create_note),
    ("GET", _I + "/notes/{nid}", get_note),
    ("PUT", _I + "/notes/{nid}", update_note),
    ("GET", _I + "/discussions", list_discussions),
    ("POST", _I + "/discussions", create_discussion),
    ("GET", _I + "/discussions/{did}", get_discussion),
    ("POST", _I + "/discussions/{did}/notes", reply_discussion),
    ("GET", _I + "/resource_label_events", list_label_events),
    ("GET", _P + "/labels", list_labels),
    ("POST", _P + "/labels", create_label),
    ("GET", _P + "/members/all", list_members_all),
    ("GET", _P + "/members/all/{uid}", get_member_all),
]

"""The GitLab testing server's endpoints of issues and merge requests: listing them (in
a group or a project, with GitLab's filters), creating, reading and updating one. A
description created or edited runs its quick actions, as its author (`quick_actions.py`)."""

from __future__ import annotations

from datetime import datetime, timezone

from starlette.responses import Response

from tests.support.gitlab import serialize as js
from tests.support.gitlab.endpoints import group_of, item_of, kind_of, project_of, require_params, user_ids
from tests.support.gitlab.models import Item, ItemKind, Project
from tests.support.gitlab.quick_actions import run_quick_actions
from tests.support.gitlab.state import GitLabState
from tests.support.gitlab.web import ApiError, Call, as_list, json_response, paginated

__all__ = ["list_group_items", "list_project_items", "create_item", "get_item", "update_item"]


# -- listing ------------------------------------------------------------------------------


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
    return _listing(state, call, state.projects_in_group(group_of(state, call)), kind_of(call))


def list_project_items(state: GitLabState, call: Call) -> Response:
    return _listing(state, call, [project_of(state, call)], kind_of(call))


# -- one issue or merge request -----------------------------------------------------------


def create_item(state: GitLabState, call: Call) -> Response:
    project = project_of(state, call)
    kind = kind_of(call)
    params = call.params
    if kind == "mr":
        require_params(call, "source_branch", "target_branch", "title")
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
        require_params(call, "title")
    assignees = [state.users[uid].username for uid in user_ids(state, params.get("assignee_ids", []))]
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
    item.description = run_quick_actions(state, item, call.user.id, item.description)
    return json_response(call.request, js.item_json(state, item, call.base_url), status=201)


def get_item(state: GitLabState, call: Call) -> Response:
    return json_response(call.request, js.item_json(state, item_of(state, call), call.base_url))


def update_item(state: GitLabState, call: Call) -> Response:
    """PUT: fields, `labels` (replace), `add_labels`/`remove_labels` (single writes), assignees, state."""
    item = item_of(state, call)
    params = call.params
    actor = call.user.id
    touched = False
    for field in ("title", "description") + (("target_branch",) if item.kind == "mr" else ()):
        if field in params and params[field] is not None:
            value = str(params[field])
            setattr(item, field, run_quick_actions(state, item, actor, value) if field == "description" else value)
            touched = True
    if "labels" in params:
        state.set_labels(item, as_list(params["labels"]), actor)
    if "add_labels" in params or "remove_labels" in params:
        state.change_labels(item, as_list(params.get("add_labels")), as_list(params.get("remove_labels")), actor)
    if "assignee_ids" in params:
        state.set_assignees(item, user_ids(state, params["assignee_ids"]), actor)
    elif "assignee_id" in params:
        state.set_assignees(item, user_ids(state, params["assignee_id"]), actor)
    event = params.get("state_event")
    if event in ("close", "reopen"):
        state.apply_state(item, "closed" if event == "close" else "opened")
    elif event is not None:
        raise ApiError(400, "state_event does not have a valid value", key="error")
    if touched:
        item.updated_at = state.clock.now()
    return json_response(call.request, js.item_json(state, item, call.base_url))

"""The GitLab testing server's endpoints of notes and discussions on issues and merge requests.

A note created or edited runs its quick actions, as its author (`quick_actions.py`).
"""

from __future__ import annotations

from starlette.responses import Response

from tests.support.gitlab import serialize as js
from tests.support.gitlab.endpoints import discussion_of, item_of, note_of, require_params
from tests.support.gitlab.quick_actions import run_quick_actions
from tests.support.gitlab.state import GitLabState
from tests.support.gitlab.web import ApiError, Call, json_response, paginated

__all__ = [
    "list_notes",
    "get_note",
    "create_note",
    "update_note",
    "list_discussions",
    "get_discussion",
    "create_discussion",
    "reply_discussion",
]


# -- notes ------------------------------------------------------------------------------


def list_notes(state: GitLabState, call: Call) -> Response:
    """GitLab's default order is newest first by `created_at`; `sort`/`order_by` change it."""
    item = item_of(state, call)
    order_by = call.params.get("order_by", "created_at")
    order_by = order_by if order_by in ("created_at", "updated_at") else "created_at"
    descending = call.params.get("sort", "desc") != "asc"
    notes = sorted(item.notes.values(), key=lambda note: (getattr(note, order_by), note.id), reverse=descending)
    return paginated(call, [js.note_json(state, note, call.base_url) for note in notes])


def get_note(state: GitLabState, call: Call) -> Response:
    note = note_of(item_of(state, call), call)
    return json_response(call.request, js.note_json(state, note, call.base_url))


def create_note(state: GitLabState, call: Call) -> Response:
    require_params(call, "body")
    item = item_of(state, call)
    note = state.post_note(item, call.user.id, run_quick_actions(state, item, call.user.id, str(call.params["body"])))
    return json_response(call.request, js.note_json(state, note, call.base_url), status=201)


def update_note(state: GitLabState, call: Call) -> Response:
    require_params(call, "body")
    item = item_of(state, call)
    note = note_of(item, call)
    if note.author_id != call.user.id and call.user.username != "root":
        raise ApiError(403, "403 Forbidden")
    state.edit_note(note, run_quick_actions(state, item, call.user.id, str(call.params["body"])))
    return json_response(call.request, js.note_json(state, note, call.base_url))


# -- discussions ------------------------------------------------------------------------


def list_discussions(state: GitLabState, call: Call) -> Response:
    item = item_of(state, call)
    data = [js.discussion_json(state, item, discussion, call.base_url) for discussion in item.discussions.values()]
    return paginated(call, data)


def get_discussion(state: GitLabState, call: Call) -> Response:
    item = item_of(state, call)
    return json_response(call.request, js.discussion_json(state, item, discussion_of(item, call), call.base_url))


def create_discussion(state: GitLabState, call: Call) -> Response:
    require_params(call, "body")
    item = item_of(state, call)
    position = call.params.get("position")
    if position is not None and not isinstance(position, dict):
        raise ApiError(400, "position is invalid", key="error")
    body = run_quick_actions(state, item, call.user.id, str(call.params["body"]))
    discussion = state.start_discussion(item, call.user.id, body, position)
    return json_response(call.request, js.discussion_json(state, item, discussion, call.base_url), status=201)


def reply_discussion(state: GitLabState, call: Call) -> Response:
    require_params(call, "body")
    item = item_of(state, call)
    body = run_quick_actions(state, item, call.user.id, str(call.params["body"]))
    note = state.reply(item, discussion_of(item, call), call.user.id, body)
    return json_response(call.request, js.note_json(state, note, call.base_url), status=201)

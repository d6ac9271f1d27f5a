"""The GitLab testing server, spoken to by python-gitlab over real HTTP.

Each test checks that python-gitlab accepts the server's answers unmodified and that
the server behaves as GitLab does where our adapter depends on it (label events,
system notes, ETags, pagination, filters, errors).
"""

from __future__ import annotations

from collections.abc import Iterator
from datetime import datetime

import gitlab
import pytest
from gitlab.exceptions import GitlabAuthenticationError, GitlabCreateError, GitlabGetError, GitlabHttpError

from coding_agent.sandbox.faults import Fault
from tests.support.gitlab import DEVELOPER, GUEST, MAINTAINER, REPORTER, GitLabSandbox

PROJECT = "acme/web"


@pytest.fixture(scope="module")
def sandbox() -> Iterator[GitLabSandbox]:
    with GitLabSandbox() as sandbox:
        state = sandbox.state
        state.add_user("alice", token="alice-token")
        state.add_user("bob", token="bob-token")
        state.add_user("carol")
        state.add_project(PROJECT)
        state.set_access(PROJECT, "alice", DEVELOPER)
        state.set_access(PROJECT, "bob", GUEST)
        yield sandbox


@pytest.fixture()
def gl(sandbox: GitLabSandbox) -> Iterator[gitlab.Gitlab]:
    client = gitlab.Gitlab(sandbox.url, private_token="alice-token", retry_transient_errors=False)
    yield client
    client.session.close()


def test_current_user_and_user_lookup(gl: gitlab.Gitlab, sandbox: GitLabSandbox) -> None:
    gl.auth()
    assert gl.user is not None and gl.user.username == "alice"
    users = gl.users.list(username="bob")
    assert [user.username for user in users] == ["bob"]
    assert users[0].id == sandbox.state.require_user("bob").id
    assert gl.users.list(username="nobody") == []


def test_requests_without_a_valid_token_get_401(sandbox: GitLabSandbox) -> None:
    with pytest.raises(GitlabAuthenticationError) as caught:
        gitlab.Gitlab(sandbox.url, private_token="wrong").auth()
    assert caught.value.response_code == 401
    assert caught.value.error_message == "401 Unauthorized"


def test_bearer_token_is_accepted(sandbox: GitLabSandbox) -> None:
    client = gitlab.Gitlab(sandbox.url, oauth_token="bob-token")
    client.auth()
    assert client.user is not None and client.user.username == "bob"


def test_issue_is_parsed_with_labels_assignees_and_references(gl: gitlab.Gitlab, sandbox: GitLabSandbox) -> None:
    iid = sandbox.state.create_issue(
        PROJECT, "Fix login", "It breaks", "alice", labels=["bug", "coding agent"], assignees=["bob", "carol"]
    )
    issue = gl.projects.get(PROJECT).issues.get(iid)
    assert issue.iid == iid
    assert issue.title == "Fix login" and issue.description == "It breaks"
    assert issue.labels == ["bug", "coding agent"]
    assert [user["username"] for user in issue.assignees] == ["bob", "carol"]
    assert issue.assignee["username"] == "bob"
    assert issue.author["username"] == "alice"
    assert issue.state == "opened"
    assert issue.references["full"] == f"{PROJECT}#{iid}"
    assert issue.web_url == f"{sandbox.url}/{PROJECT}/-/issues/{iid}"
    assert datetime.fromisoformat(issue.created_at.replace("Z", "+00:00")).tzinfo is not None


def test_merge_request_is_parsed_with_branches(gl: gitlab.Gitlab, sandbox: GitLabSandbox) -> None:
    iid = sandbox.state.create_merge_request(
        PROJECT, "Draft: Add cache", "Speeds things up", "alice", source_branch="cache", labels=["coding agent"]
    )
    mr = gl.projects.get(PROJECT, lazy=True).mergerequests.get(iid)
    assert (mr.source_branch, mr.target_branch) == ("cache", "main")
    assert mr.draft is True
    assert mr.references["full"] == f"{PROJECT}!{iid}"
    assert mr.assignee is None and mr.assignees == []


def test_project_by_numeric_id_and_by_encoded_path(gl: gitlab.Gitlab, sandbox: GitLabSandbox) -> None:
    by_path = gl.projects.get(PROJECT)
    by_id = gl.projects.get(by_path.id)
    assert by_id.path_with_namespace == PROJECT
    assert by_id.namespace["full_path"] == "acme"
    assert by_id.default_branch == "main"
    assert sandbox.state.count_requests("GET", "/projects/acme/web") >= 1


def test_unknown_issue_is_404(gl: gitlab.Gitlab) -> None:
    with pytest.raises(GitlabGetError) as caught:
        gl.projects.get(PROJECT, lazy=True).issues.get(9999)
    assert caught.value.response_code == 404
    assert "404" in caught.value.error_message


def test_label_changes_through_the_api_create_label_events_and_system_notes(
    gl: gitlab.Gitlab, sandbox: GitLabSandbox
) -> None:
    state = sandbox.state
    iid = state.create_issue(PROJECT, "Labels", author="bob", labels=["bug"])
    issues = gl.projects.get(PROJECT, lazy=True).issues
    issues.update(iid, {"add_labels": "brand new"})
    issues.update(iid, {"remove_labels": "bug,not-there"})
    assert state.labels_of(PROJECT, iid) == ["brand new"]
    assert "brand new" in state.project_labels(PROJECT)
    events = issues.get(iid, lazy=True).resourcelabelevents.list(get_all=True)
    assert [(e.action, e.label["name"], e.user["username"]) for e in events] == [
        ("add", "bug", "bob"),
        ("add", "brand new", "alice"),
        ("remove", "bug", "alice"),
    ]
    notes = issues.get(iid, lazy=True).notes.list(get_all=True, sort="asc")
    system_notes = [note.body for note in notes if note.system]
    assert system_notes == ['added ~"brand new" label', 'removed ~"bug" label']


def test_labels_replace_and_assignee_ids(gl: gitlab.Gitlab, sandbox: GitLabSandbox) -> None:
    state = sandbox.state
    iid = state.create_issue(PROJECT, "Replace", labels=["a", "b"])
    bob = state.require_user("bob").id
    issues = gl.projects.get(PROJECT, lazy=True).issues
    data = issues.update(iid, {"labels": "b,c", "assignee_ids": [bob]})
    assert data["labels"] == ["b", "c"]
    assert state.assignees_of(PROJECT, iid) == ["bob"]
    issues.update(iid, {"assignee_ids": []})
    assert state.assignees_of(PROJECT, iid) == []
    bodies = [note.body for note in state.notes(PROJECT, iid, system=True)]
    assert "assigned to @bob" in bodies and "unassigned @bob" in bodies


def test_notes_create_list_sort_and_edit(gl: gitlab.Gitlab, sandbox: GitLabSandbox) -> None:
    state = sandbox.state
    iid = state.create_issue(PROJECT, "Notes")
    state.add_note(PROJECT, iid, "bob", "first")
    issue = gl.projects.get(PROJECT, lazy=True).issues.get(iid, lazy=True)
    created = issue.notes.create({"body": "second"})
    assert created.author["username"] == "alice" and created.system is False
    ascending = [note.body for note in issue.notes.list(get_all=True, sort="asc")]
    descending = [note.body for note in issue.notes.list(get_all=True)]
    assert ascending == ["first", "second"]
    assert descending == ["second", "first"]
    issue.notes.update(created.id, {"body": "second, edited"})
    assert [note.body for note in state.notes(PROJECT, iid)] == ["first", "second, edited"]
    with pytest.raises(gitlab.exceptions.GitlabUpdateError) as caught:
        issue.notes.update(state.notes(PROJECT, iid)[0].id, {"body": "not mine"})
    assert caught.value.response_code == 403


def test_discussions_list_create_and_reply(gl: gitlab.Gitlab, sandbox: GitLabSandbox) -> None:
    state = sandbox.state
    iid = state.create_merge_request(PROJECT, "Threads", source_branch="threads")
    position = {"position_type": "text", "new_path": "app.py", "new_line": 12, "old_path": "app.py", "old_line": None}
    discussion_id = state.add_discussion(PROJECT, iid, "bob", "Why this?", position=position)
    state.add_note(PROJECT, iid, "bob", "plain comment", kind="mr")
    mr = gl.projects.get(PROJECT, lazy=True).mergerequests.get(iid, lazy=True)
    reply = mr.discussions.get(discussion_id, lazy=True).notes.create({"body": "Because."})
    assert reply.type == "DiffNote"
    started = mr.discussions.create({"body": "General thread"})
    assert started.individual_note is False
    discussions = mr.discussions.list(get_all=True)
    shapes = [(d.individual_note, [note["body"] for note in d.attributes["notes"]]) for d in discussions]
    assert shapes == [
        (False, ["Why this?", "Because."]),
        (True, ["plain comment"]),
        (False, ["General thread"]),
    ]
    assert discussions[0].attributes["notes"][0]["position"]["new_line"] == 12
    assert [note.body for note in state.notes(PROJECT, iid, kind="mr")][-1] == "General thread"


def test_project_labels_list_create_and_conflict(gl: gitlab.Gitlab, sandbox: GitLabSandbox) -> None:
    labels = gl.projects.get(PROJECT, lazy=True).labels
    created = labels.create({"name": "needs review", "color": "#123456"})
    assert created.name == "needs review" and created.color == "#123456"
    assert "needs review" in [label.name for label in labels.list(get_all=True)]
    with pytest.raises(GitlabCreateError) as caught:
        labels.create({"name": "needs review", "color": "#123456"})
    assert caught.value.response_code == 409


def test_members_all_includes_inherited_group_access(gl: gitlab.Gitlab, sandbox: GitLabSandbox) -> None:
    state = sandbox.state
    state.add_user("dora")
    state.add_project("acme/sub/tool")
    state.set_access("acme", "dora", REPORTER)
    state.set_access("acme/sub/tool", "carol", MAINTAINER)
    members = gl.projects.get("acme/sub/tool", lazy=True).members_all
    assert members.get(state.require_user("dora").id).access_level == REPORTER
    assert members.get(state.require_user("carol").id).access_level == MAINTAINER
    with pytest.raises(GitlabGetError) as caught:
        members.get(state.require_user("bob").id)
    assert caught.value.response_code == 404


def test_etag_answers_304_on_if_none_match(gl: gitlab.Gitlab, sandbox: GitLabSandbox) -> None:
    state = sandbox.state
    iid = state.create_issue(PROJECT, "Conditional")
    path = f"/projects/acme%2Fweb/issues/{iid}"
    first = gl.http_request("get", path)
    etag = first.headers["ETag"]
    with pytest.raises(GitlabHttpError) as caught:
        gl.http_request("get", path, extra_headers={"If-None-Match": etag})
    assert caught.value.response_code == 304
    assert state.requests()[-1].not_modified
    state.add_label(PROJECT, iid, "changed", actor="bob")
    again = gl.http_request("get", path, extra_headers={"If-None-Match": etag})
    assert again.status_code == 200 and again.headers["ETag"] != etag


def test_pagination_headers_and_python_gitlab_follows_every_page(gl: gitlab.Gitlab, sandbox: GitLabSandbox) -> None:
    state = sandbox.state
    iid = state.create_issue(PROJECT, "Busy")
    for number in range(150):
        state.add_note(PROJECT, iid, "bob", f"note {number}")
    path = f"/projects/acme%2Fweb/issues/{iid}/notes"
    page = gl.http_request("get", path, query_data={"per_page": 100, "page": 1})
    assert page.headers["X-Total"] == "150" and page.headers["X-Total-Pages"] == "2"
    assert page.headers["X-Next-Page"] == "2" and page.headers["X-Prev-Page"] == ""
    assert page.headers["X-Page"] == "1" and page.headers["X-Per-Page"] == "100"
    assert 'rel="next"' in page.headers["Link"]
    notes = gl.projects.get(PROJECT, lazy=True).issues.get(iid, lazy=True).notes
    bodies = [note.body for note in notes.list(get_all=True, per_page=100, sort="asc")]
    assert bodies == [f"note {number}" for number in range(150)]
    capped = gl.http_request("get", path, query_data={"per_page": 500})
    assert capped.headers["X-Per-Page"] == "100" and len(capped.json()) == 100


def test_group_listing_filters(gl: gitlab.Gitlab, sandbox: GitLabSandbox) -> None:
    state = sandbox.state
    state.add_project("listing/one")
    state.add_project("listing/deep/two")
    state.add_project("elsewhere/three")
    wanted = state.create_issue("listing/one", "wanted", labels=["coding agent", "x"], assignees=["bob"])
    state.create_issue("listing/one", "only x", labels=["x"])
    deep = state.create_issue("listing/deep/two", "deep", labels=["coding agent"])
    closed = state.create_issue("listing/one", "closed", labels=["coding agent"])
    state.set_state("listing/one", closed, "closed")
    state.create_issue("elsewhere/three", "other group", labels=["coding agent"])
    group = gl.groups.get("listing", lazy=True)
    found = group.issues.list(labels=["coding agent"], state="opened", scope="all", get_all=True)
    assert sorted((issue.references["full"]) for issue in found) == [
        f"listing/deep/two#{deep}",
        f"listing/one#{wanted}",
    ]
    both = group.issues.list(labels=["coding agent", "x"], get_all=True)
    assert [issue.title for issue in both] == ["wanted"]
    assigned = group.issues.list(labels=["coding agent"], assignee_username="bob", get_all=True)
    assert [issue.title for issue in assigned] == ["wanted"]
    by_numeric_id = gl.groups.get(state.require_group("listing").id, lazy=True).issues.list(get_all=True)
    assert len(by_numeric_id) == 4


def test_create_merge_request_conflict_and_source_branch_filter(gl: gitlab.Gitlab, sandbox: GitLabSandbox) -> None:
    mrs = gl.projects.get(PROJECT, lazy=True).mergerequests
    sandbox.state.create_branch(PROJECT, "agent/fix-1")
    created = mrs.create(
        {"source_branch": "agent/fix-1", "target_branch": "main", "title": "Draft: Fix 1", "labels": ["coding agent"]}
    )
    assert created.iid >= 1 and created.draft is True and created.labels == ["coding agent"]
    assert created.author["username"] == "alice"
    with pytest.raises(GitlabCreateError) as caught:
        mrs.create({"source_branch": "agent/fix-1", "target_branch": "main", "title": "again"})
    assert caught.value.response_code == 409
    listed = mrs.list(source_branch="agent/fix-1", state="opened", get_all=True)
    assert [mr.iid for mr in listed] == [created.iid]
    assert mrs.list(source_branch="no-such-branch", get_all=True) == []


def test_injected_fault_answers_then_clears(gl: gitlab.Gitlab, sandbox: GitLabSandbox) -> None:
    sandbox.faults.add(Fault(r"GET /api/v4/projects/.*$", count=1, status=503))
    with pytest.raises(GitlabGetError) as caught:
        gl.projects.get(PROJECT)
    assert caught.value.response_code == 503
    assert gl.projects.get(PROJECT).path_with_namespace == PROJECT
    statuses = [record.status for record in sandbox.state.requests()[-2:]]
    assert statuses == [503, 200]

"""The GitHub testing server over real HTTP: githubkit parses every shape, and the
protocol details the agent relies on (ETag/304, Link pagination, rate-limit headers,
errors, search qualifiers, events) behave like api.github.com."""

from __future__ import annotations

from collections.abc import Iterator

import httpx
import pytest
from githubkit import GitHub
from githubkit.exception import RequestFailed
from githubkit.utils import UNSET

from coding_agent.sandbox.faults import Fault
from coding_agent.sandbox.github import GitHubSandbox

TOKEN = "t-bot"
REPO = "acme/widgets"


@pytest.fixture
def sandbox() -> Iterator[GitHubSandbox]:
    with GitHubSandbox() as box:
        state = box.state
        state.add_user("alice", token="t-alice")
        state.add_user("bot", token=TOKEN)
        state.add_repo(REPO)
        state.set_permission(REPO, "alice", "write")
        state.set_permission(REPO, "bot", "write")
        yield box


@pytest.fixture
def http(sandbox: GitHubSandbox) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=sandbox.url, headers={"Authorization": f"token {TOKEN}"}) as client:
        yield client


def _github(sandbox: GitHubSandbox) -> GitHub:
    return GitHub(TOKEN, base_url=sandbox.url, auto_retry=False, http_cache=False)


async def test_githubkit_parses_every_endpoint(sandbox: GitHubSandbox) -> None:
    state = sandbox.state
    issue = state.create_issue(REPO, "Fix the bug", "Details", "alice", labels=["coding agent"], assignees=["bot"])
    pull = state.create_pull(REPO, "Add feature", "PR body", "alice", head="feature", labels=["coding agent"])
    state.add_comment(REPO, issue, "alice", "first")
    root = state.add_review_comment(REPO, pull, "alice", "nit", "src/app.py", 12)
    state.create_branch(REPO, "topic")
    github = _github(sandbox)  # githubkit's namespaces hold it only weakly
    rest = github.rest
    owner, name = REPO.split("/")

    user = (await rest.users.async_get_authenticated()).parsed_data
    repo = (await rest.repos.async_get(owner, name)).parsed_data
    found = (await rest.search.async_issues_and_pull_requests(q=f'is:open label:"coding agent" repo:{REPO}')).parsed_data
    got_issue = (await rest.issues.async_get(owner, name, issue)).parsed_data
    got_pull = (await rest.pulls.async_get(owner, name, pull)).parsed_data
    comments = (await rest.issues.async_list_comments(owner, name, issue)).parsed_data
    created = (await rest.issues.async_create_comment(owner, name, issue, body="second")).parsed_data
    edited = (await rest.issues.async_update_comment(owner, name, created.id, body="second, edited")).parsed_data
    added = (await rest.issues.async_add_labels(owner, name, issue, labels=["needs review"])).parsed_data
    remaining = (await rest.issues.async_remove_label(owner, name, issue, "needs review")).parsed_data
    new_label = (await rest.issues.async_create_label(owner, name, name="triaged", color="00ff00")).parsed_data
    one_label = (await rest.issues.async_get_label(owner, name, "triaged")).parsed_data
    repo_labels = (await rest.issues.async_list_labels_for_repo(owner, name)).parsed_data
    assigned = (await rest.issues.async_add_assignees(owner, name, issue, assignees=["alice"])).parsed_data
    unassigned = (await rest.issues.async_remove_assignees(owner, name, issue, assignees=["alice"])).parsed_data
    events = (await rest.issues.async_list_events(owner, name, issue)).parsed_data
    permission = (await rest.repos.async_get_collaborator_permission_level(owner, name, "alice")).parsed_data
    reviews = (await rest.pulls.async_list_review_comments(owner, name, pull)).parsed_data
    reply = (await rest.pulls.async_create_reply_for_review_comment(owner, name, pull, root, body="ok")).parsed_data
    new_issue = (await rest.issues.async_create(owner, name, title="New", body="b", labels=["x"])).parsed_data
    new_pull = (await rest.pulls.async_create(owner, name, title="T", head="acme:topic", base="main")).parsed_data
    listed = (await rest.pulls.async_list(owner, name, head="acme:topic", state="open")).parsed_data

    assert user.login == "bot"
    assert repo.full_name == REPO and repo.default_branch == "main"
    assert {item.number for item in found.items} == {issue, pull}
    assert [item.pull_request not in (None, UNSET) for item in sorted(found.items, key=lambda i: i.number)] == [False, True]
    assert got_issue.title == "Fix the bug" and [a.login for a in got_issue.assignees or []] == ["bot"]
    assert (got_pull.head.ref, got_pull.base.ref, got_pull.head.label) == ("feature", "main", "acme:feature")
    assert [c.body for c in comments] == ["first"]
    assert edited.id == created.id and edited.body == "second, edited"
    assert [label.name for label in added] == ["coding agent", "needs review"]
    assert [label.name for label in remaining] == ["coding agent"]
    assert new_label.name == one_label.name == "triaged" and one_label.color == "00ff00"
    assert "triaged" in {label.name for label in repo_labels}
    assert {a.login for a in assigned.assignees or []} == {"bot", "alice"}
    assert [a.login for a in unassigned.assignees or []] == ["bot"]
    assert [e.event for e in events] == ["labeled", "assigned", "labeled", "unlabeled", "assigned", "unassigned"]
    assert (permission.permission, permission.role_name) == ("write", "write")
    assert [c.path for c in reviews] == ["src/app.py"]
    assert reply.in_reply_to_id == root and reply.path == "src/app.py"
    assert new_issue.number == pull + 1 and [label.name for label in new_issue.labels] == ["x"]  # type: ignore[union-attr]
    assert [p.number for p in listed] == [new_pull.number]


def test_missing_and_unknown_tokens_get_githubs_401(sandbox: GitHubSandbox) -> None:
    with httpx.Client(base_url=sandbox.url) as client:
        missing = client.get("/user")
        wrong = client.get("/user", headers={"Authorization": "Bearer nope"})
        bearer = client.get("/user", headers={"Authorization": f"Bearer {TOKEN}"})
    assert missing.status_code == 401 and missing.json()["message"] == "Requires authentication"
    assert wrong.status_code == 401 and wrong.json()["message"] == "Bad credentials"
    assert set(wrong.json()) >= {"message", "documentation_url"}
    assert bearer.status_code == 200 and bearer.json()["login"] == "bot"


def test_not_found_is_json_like_github(http: httpx.Client) -> None:
    for path in ("/repos/acme/nothing", f"/repos/{REPO}/issues/99", "/no/such/route"):
        response = http.get(path)
        assert response.status_code == 404, path
        assert response.json()["message"] == "Not Found"


def test_private_repository_is_hidden_from_users_without_access(sandbox: GitHubSandbox, http: httpx.Client) -> None:
    sandbox.state.add_repo("acme/secret", private=True)
    sandbox.state.create_issue("acme/secret", "hidden", labels=["coding agent"])
    assert http.get("/repos/acme/secret").status_code == 404
    assert http.get("/search/issues", params={"q": "user:acme"}).json()["total_count"] == 0
    sandbox.state.set_permission("acme/secret", "bot", "read")
    assert http.get("/repos/acme/secret").status_code == 200
    assert http.get("/search/issues", params={"q": "user:acme"}).json()["total_count"] == 1


def test_conditional_get_is_a_304_not_counted_against_the_rate_limit(sandbox: GitHubSandbox, http: httpx.Client) -> None:
    number = sandbox.state.create_issue(REPO, "cached")
    first = http.get(f"/repos/{REPO}/issues/{number}")
    etag = first.headers["etag"]
    second = http.get(f"/repos/{REPO}/issues/{number}", headers={"If-None-Match": etag})

    assert etag.startswith('"') and not etag.startswith("W/")
    assert second.status_code == 304 and second.content == b""
    assert second.headers["etag"] == etag
    assert second.headers["x-ratelimit-remaining"] == first.headers["x-ratelimit-remaining"]
    assert int(second.headers["x-ratelimit-used"]) == int(first.headers["x-ratelimit-used"])
    assert [r.status for r in sandbox.state.requests()] == [200, 304]
    assert len(sandbox.state.counted_requests()) == 1

    sandbox.state.assign(REPO, number, "alice", "alice")
    changed = http.get(f"/repos/{REPO}/issues/{number}", headers={"If-None-Match": etag})
    assert changed.status_code == 200 and changed.headers["etag"] != etag
    assert [a["login"] for a in changed.json()["assignees"]] == ["alice"]
    assert int(changed.headers["x-ratelimit-remaining"]) == int(first.headers["x-ratelimit-remaining"]) - 1


def test_every_response_carries_rate_limit_headers(http: httpx.Client) -> None:
    for response in (http.get("/user"), http.get("/repos/acme/nothing")):
        assert {"x-ratelimit-limit", "x-ratelimit-remaining", "x-ratelimit-reset", "x-ratelimit-used"} <= set(
            response.headers
        )


def test_exhausted_rate_limit_is_a_403_with_remaining_zero(sandbox: GitHubSandbox, http: httpx.Client) -> None:
    sandbox.state.set_rate_limit(remaining=0, reset_in=120)
    response = http.get("/user")
    assert response.status_code == 403
    assert response.headers["x-ratelimit-remaining"] == "0"
    assert "rate limit exceeded" in response.json()["message"]


def test_pagination_has_link_headers_and_caps_per_page(sandbox: GitHubSandbox, http: httpx.Client) -> None:
    number = sandbox.state.create_issue(REPO, "chatty")
    for index in range(150):
        sandbox.state.add_comment(REPO, number, "alice", f"comment {index}")
    path = f"/repos/{REPO}/issues/{number}/comments"

    first = http.get(path, params={"per_page": 500})
    assert len(first.json()) == 100
    assert first.links["next"]["url"].endswith("page=2&per_page=100")
    assert "page=2" in first.links["last"]["url"]
    second = http.get(first.links["next"]["url"])
    assert [c["body"] for c in second.json()] == [f"comment {i}" for i in range(100, 150)]
    assert "next" not in second.links and "prev" in second.links
    assert len(http.get(path).json()) == 30  # GitHub's default page size


def test_comments_since_filters_by_update_time(sandbox: GitHubSandbox, http: httpx.Client) -> None:
    number = sandbox.state.create_issue(REPO, "since")
    old = sandbox.state.add_comment(REPO, number, "alice", "old")
    cutoff = sandbox.state.comment(old).updated_at
    listed = http.get(f"/repos/{REPO}/issues/{number}/comments", params={"since": "2999-01-01T00:00:00Z"})
    assert listed.json() == []
    listed = http.get(f"/repos/{REPO}/issues/{number}/comments", params={"since": cutoff.strftime("%Y-%m-%dT%H:%M:%SZ")})
    assert [c["id"] for c in listed.json()] == [old]


def _numbers(http: httpx.Client, q: str) -> set[int]:
    response = http.get("/search/issues", params={"q": q, "per_page": 100})
    assert response.status_code == 200, response.text
    return {item["number"] for item in response.json()["items"]}


def test_search_qualifiers(sandbox: GitHubSandbox, http: httpx.Client) -> None:
    state = sandbox.state
    state.add_repo("acme/gadgets")
    state.add_repo("other/tools")
    labelled = state.create_issue(REPO, "one", labels=["coding agent"], assignees=["bot"])
    pull = state.create_pull(REPO, "two", head="b", labels=["coding agent"])
    unlabelled = state.create_issue(REPO, "three")
    closed = state.create_issue(REPO, "four", labels=["coding agent"])
    state.update_issue(REPO, closed, state="closed")
    gadget = state.create_issue("acme/gadgets", "five", labels=["coding agent"])
    foreign = state.create_issue("other/tools", "six", labels=["coding agent"])

    assert _numbers(http, 'is:open label:"coding agent" repo:acme/widgets') == {labelled, pull}
    assert _numbers(http, 'is:open label:"coding agent" repo:acme/widgets is:issue') == {labelled}
    assert _numbers(http, 'is:open label:"coding agent" repo:acme/widgets is:pr') == {pull}
    assert _numbers(http, f"repo:{REPO} is:closed") == {closed}
    assert _numbers(http, f"repo:{REPO} no:label") == {unlabelled}
    assert _numbers(http, 'label:"coding agent" user:acme is:open') == {labelled, pull, gadget}
    assert _numbers(http, 'label:"coding agent" repo:acme/gadgets repo:other/tools') == {gadget, foreign}
    assert _numbers(http, f'label:"coding agent" repo:{REPO} assignee:bot archived:false') == {labelled}
    assert _numbers(http, f"repo:{REPO} three") == {unlabelled}


def test_search_rejects_queries_longer_than_github_allows(http: httpx.Client) -> None:
    response = http.get("/search/issues", params={"q": "repo:acme/widgets " * 20})
    assert response.status_code == 422
    assert response.json()["message"] == "Validation Failed"


@pytest.mark.parametrize(
    ("level", "permission"),
    [("admin", "admin"), ("maintain", "write"), ("write", "write"), ("triage", "read"), ("read", "read")],
)
def test_permission_endpoint_folds_roles_like_github(
    sandbox: GitHubSandbox, http: httpx.Client, level: str, permission: str
) -> None:
    sandbox.state.add_repo("acme/secret", private=True)
    sandbox.state.set_permission("acme/secret", "bot", "read")
    sandbox.state.set_permission("acme/secret", "carol", level)
    body = http.get("/repos/acme/secret/collaborators/carol/permission").json()
    assert (body["permission"], body["role_name"], body["user"]["login"]) == (permission, level, "carol")


def test_permission_of_a_stranger(sandbox: GitHubSandbox, http: httpx.Client) -> None:
    sandbox.state.add_user("stranger")
    sandbox.state.add_repo("acme/secret", private=True)
    sandbox.state.set_permission("acme/secret", "bot", "read")
    assert http.get("/repos/acme/secret/collaborators/stranger/permission").json()["permission"] == "none"
    assert http.get(f"/repos/{REPO}/collaborators/stranger/permission").json()["permission"] == "read"
    assert http.get(f"/repos/{REPO}/collaborators/nobody-at-all/permission").status_code == 404


def test_labels_are_created_on_use_and_removing_an_absent_one_is_404(sandbox: GitHubSandbox, http: httpx.Client) -> None:
    number = sandbox.state.create_issue(REPO, "labels")
    added = http.post(f"/repos/{REPO}/issues/{number}/labels", json={"labels": ["coding agent processing"]})
    assert added.status_code == 200
    assert [label.name for label in sandbox.state.labels(REPO)] == ["coding agent processing"]
    assert sandbox.state.issue(REPO, number).labels == ("coding agent processing",)
    assert http.get(f"/repos/{REPO}/labels/coding%20agent%20processing").status_code == 200

    missing = http.delete(f"/repos/{REPO}/issues/{number}/labels/not-there")
    assert missing.status_code == 404 and missing.json()["message"] == "Label does not exist"
    removed = http.delete(f"/repos/{REPO}/issues/{number}/labels/coding%20agent%20processing")
    assert removed.status_code == 200 and removed.json() == []
    duplicate = http.post(f"/repos/{REPO}/labels", json={"name": "Coding Agent Processing", "color": "ffffff"})
    assert duplicate.status_code == 422 and duplicate.json()["errors"][0]["code"] == "already_exists"


def test_label_and_assignee_changes_record_events_with_the_actor(sandbox: GitHubSandbox, http: httpx.Client) -> None:
    number = sandbox.state.create_issue(REPO, "events")
    sandbox.state.add_label(REPO, number, "coding agent", "alice")
    http.post(f"/repos/{REPO}/issues/{number}/assignees", json={"assignees": ["bot"]})
    http.delete(f"/repos/{REPO}/issues/{number}/labels/coding%20agent")
    events = http.get(f"/repos/{REPO}/issues/{number}/events").json()
    assert [(e["event"], e["actor"]["login"]) for e in events] == [
        ("labeled", "alice"),
        ("assigned", "bot"),
        ("unlabeled", "bot"),
    ]
    assert events[0]["label"]["name"] == "coding agent"
    assert events[1]["assignee"]["login"] == "bot"


def test_triage_is_needed_to_label(sandbox: GitHubSandbox) -> None:
    sandbox.state.add_user("reader", token="t-reader")
    number = sandbox.state.create_issue(REPO, "protected")
    with httpx.Client(base_url=sandbox.url, headers={"Authorization": "token t-reader"}) as client:
        response = client.post(f"/repos/{REPO}/issues/{number}/labels", json={"labels": ["x"]})
    assert response.status_code == 403
    assert sandbox.state.issue(REPO, number).labels == ()


def test_a_second_pull_for_the_same_branch_is_refused(sandbox: GitHubSandbox, http: httpx.Client) -> None:
    body = {"title": "T", "head": "acme:topic", "base": "main", "body": "Closes #1", "draft": True}
    sandbox.state.create_branch(REPO, "topic")
    first = http.post(f"/repos/{REPO}/pulls", json=body)
    second = http.post(f"/repos/{REPO}/pulls", json=body)
    assert first.status_code == 201 and first.json()["draft"] is True
    assert second.status_code == 422
    assert "already exists" in second.json()["errors"][0]["message"]
    listed = http.get(f"/repos/{REPO}/pulls", params={"head": "acme:topic", "state": "open"}).json()
    assert [p["number"] for p in listed] == [first.json()["number"]]
    assert http.get(f"/repos/{REPO}/pulls", params={"head": "acme:other"}).json() == []


async def test_injected_faults_are_served_and_logged(sandbox: GitHubSandbox) -> None:
    sandbox.faults.add(Fault(pattern=r"GET /user$", count=1, status=502))
    github = _github(sandbox)  # githubkit's namespaces hold it only weakly
    rest = github.rest
    with pytest.raises(RequestFailed) as failure:
        await rest.users.async_get_authenticated()
    assert failure.value.response.status_code == 502
    assert (await rest.users.async_get_authenticated()).parsed_data.login == "bot"
    assert [(r.status, r.fault) for r in sandbox.state.requests()] == [(502, True), (200, False)]

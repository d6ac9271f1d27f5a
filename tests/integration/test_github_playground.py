"""The sandbox forge's page for people (`demo --serve`, SPEC 12) over real HTTP: a
maintainer opens, labels, comments on and unassigns issues without a token; bad input
and writes from elsewhere are refused with a clear error; the REST API still wants its
token."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from coding_agent.sandbox.github import GitHubSandbox
from coding_agent.sandbox.github.playground import Playground

REPO = "acme/toys"
MAINTAINER = "maria"
BOT = "toy-bot"


@pytest.fixture
def sandbox() -> Iterator[GitHubSandbox]:
    with GitHubSandbox(playground=Playground(REPO, MAINTAINER, BOT, dashboard_url="http://127.0.0.1:9/")) as running:
        state = running.state
        state.add_user(MAINTAINER)
        state.add_user(BOT, token="t-toy-bot-8d1f", bot=True)
        state.add_repo(REPO)
        state.init_repo(REPO, files={"README.md": "# toys\n"})
        state.set_permission(REPO, MAINTAINER, "admin")
        state.set_permission(REPO, BOT, "write")
        yield running


@pytest.fixture
def page(sandbox: GitHubSandbox) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=sandbox.url + "/_playground", timeout=10) as client:
        yield client


def _issue(page: httpx.Client, number: int) -> dict[str, Any]:
    issues = page.get("/issues").json()["issues"]
    return next(issue for issue in issues if issue["number"] == number)


def test_a_maintainer_opens_labels_comments_and_unassigns(sandbox: GitHubSandbox, page: httpx.Client) -> None:
    html = page.get("/")
    assert html.status_code == 200 and "acme/toys" in html.text and 'href="http://127.0.0.1:9/"' in html.text
    created = page.post("/issues", json={"title": "  Add a kite  ", "body": "Blue, please."})
    assert created.status_code == 201
    number = created.json()["number"]
    assert sandbox.state.issue(REPO, number).author == MAINTAINER
    assert _issue(page, number)["title"] == "Add a kite"

    assert page.post(f"/issues/{number}/label", json={}).status_code == 200
    issue = sandbox.state.issue(REPO, number)
    assert issue.labels == ("coding agent",) and issue.assignees == (BOT,)
    events = [(event.event, event.actor) for event in sandbox.state.events(REPO, number)]
    assert ("labeled", MAINTAINER) in events and ("assigned", MAINTAINER) in events

    sandbox.state.add_comment(REPO, number, BOT, "Working on it.\n<!-- coding-agent:hidden-marker -->")
    assert page.post(f"/issues/{number}/comments", json={"body": "<b>bold</b> idea"}).status_code == 201
    comments = _issue(page, number)["comments"]
    assert [(c["author"], c["body"]) for c in comments] == [(BOT, "Working on it."), (MAINTAINER, "<b>bold</b> idea")]

    assert page.post(f"/issues/{number}/unassign", json={}).status_code == 200
    assert sandbox.state.issue(REPO, number).assignees == ()
    assert _issue(page, number)["assignees"] == []


def test_the_page_needs_no_token_but_the_api_still_does(sandbox: GitHubSandbox) -> None:
    assert httpx.get(sandbox.url + "/user").status_code == 401
    assert httpx.get(sandbox.url + "/_playground", follow_redirects=True).status_code == 200


@pytest.mark.parametrize(
    ("path", "request_args", "status", "problem"),
    [
        ("/issues", {"json": {"title": "   "}}, 400, "title is empty"),
        ("/issues", {"json": {"title": "x" * 300}}, 400, "title is longer than 256"),
        ("/issues", {"json": {"title": 5}}, 400, "title must be text"),
        ("/issues", {"json": ["title"]}, 400, "must be a JSON object"),
        ("/issues", {"content": b"{nope", "headers": {"Content-Type": "application/json"}}, 400, "not valid JSON"),
        ("/issues", {"data": {"title": "a form post"}}, 415, "must be JSON"),
        ("/issues", {"json": {"title": "t"}, "headers": {"Origin": "http://evil.example"}}, 403, "own page"),
        ("/issues", {"json": {"title": "t"}, "headers": {"Host": "evil.example:80"}}, 403, "loopback"),
        ("/issues/99/label", {"json": {}}, 404, "no issue #99"),
        ("/issues/1/comments", {"json": {"body": ""}}, 400, "body is empty"),
    ],
)
def test_bad_writes_are_refused_naming_the_problem(
    sandbox: GitHubSandbox, page: httpx.Client, path: str, request_args: dict[str, Any], status: int, problem: str
) -> None:
    sandbox.state.create_issue(REPO, "One", author=MAINTAINER)
    response = page.post(path, **request_args)
    assert response.status_code == status
    assert problem in response.json()["error"]
    assert [issue.title for issue in sandbox.state.issues()] == ["One"]


def test_reads_too_answer_only_on_the_loopback_address(page: httpx.Client) -> None:
    for path in ("/", "/issues"):
        response = page.get(path, headers={"Host": "rebound.example:8080"})
        assert response.status_code == 403 and "loopback" in response.json()["error"]


def test_pull_requests_are_not_issues_here(sandbox: GitHubSandbox, page: httpx.Client) -> None:
    number = sandbox.state.create_issue(REPO, "Fix", author=MAINTAINER)
    pull = sandbox.state.create_pull(REPO, "Fix it", head="agent/fix", base="main", body=f"Closes #{number}", author=BOT)
    assert page.post(f"/issues/{pull}/label", json={}).status_code == 404
    assert [p["number"] for p in _issue(page, number)["pulls"]] == [pull]
    assert [i["number"] for i in page.get("/issues").json()["issues"]] == [number]

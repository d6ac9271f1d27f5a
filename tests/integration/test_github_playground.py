"""The sandbox forge's page for people (`demo --serve`, SPEC 12) over real HTTP: a
maintainer opens, labels, comments on and unassigns issues without a token, with the
run's secret; bad input, writes from elsewhere and any call without the secret are
refused with a clear error; the REST API still wants its token."""

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
    """A client holding the run's secret, as the header a script may send."""
    assert sandbox.playground is not None
    headers = {"X-Playground-Key": sandbox.playground.secret}
    with httpx.Client(base_url=sandbox.url + "/_playground", headers=headers, timeout=10) as client:
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
    assert sandbox.playground is not None and f"?key={sandbox.playground.secret}" in sandbox.playground_url
    assert httpx.get(sandbox.playground_url.replace("/_playground/", "/_playground"), follow_redirects=True).status_code == 200


def test_the_urls_secret_becomes_the_cookie_and_nothing_works_without_it(sandbox: GitHubSandbox) -> None:
    assert sandbox.playground is not None
    secret = sandbox.playground.secret
    assert len(secret) >= 32 and Playground(REPO, MAINTAINER, BOT).secret != secret, "random per run"
    base = sandbox.url + "/_playground"
    for wrong in ({}, {"params": {"key": secret[:-1]}}, {"headers": {"X-Playground-Key": ""}}, {"cookies": {"coding_agent_playground": "x"}}):
        for method, path in (("GET", "/"), ("GET", "/issues"), ("POST", "/issues"), ("POST", "/issues/1/label")):
            response = httpx.request(method, base + path, json={"title": "t"}, timeout=10, **wrong)  # type: ignore[arg-type]
            assert response.status_code == 401 and "secret" in response.json()["error"], (method, path, wrong)
    assert sandbox.state.issues() == []
    opened = httpx.get(sandbox.playground_url, timeout=10)
    cookie = opened.headers["set-cookie"]
    assert opened.status_code == 200 and "HttpOnly" in cookie and "SameSite=strict" in cookie and "Path=/_playground" in cookie
    with httpx.Client(base_url=base, cookies=opened.cookies, timeout=10) as browser:
        assert browser.post("/issues", json={"title": "by cookie"}).status_code == 201
    assert [issue.title for issue in sandbox.state.issues()] == ["by cookie"]


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

"""GitHubSource against the GitHub testing server over real HTTP (githubkit underneath)."""

from __future__ import annotations

import asyncio
import gc
import secrets
import socket
import sys
import threading
import time
from collections.abc import AsyncIterator, Iterator
from datetime import datetime, timedelta, timezone

import pytest
from pydantic import SecretStr

from coding_agent.config import GitHubConfig
from coding_agent.domain.tasks import Permission, Task, TaskKey, TaskKind
from coding_agent.errors import ForgeError, TransientError
from coding_agent.retry import RetryPolicy
from coding_agent.sandbox.faults import Fault
from coding_agent.sandbox.github import GitHubSandbox, GitHubState
from coding_agent.sources.base import Source
from coding_agent.sources.github import GitHubNotFoundError, GitHubSource, build_search_query
from coding_agent.sources.writes import strip_marker

from tests.support.waiting import wait_until

TOKEN = "ghp-sandbox-secret-token-1234"
REPO = "acme/widgets"
BOT_LABEL = "coding agent"


@pytest.fixture
def sandbox() -> Iterator[GitHubSandbox]:
    with GitHubSandbox() as box:
        state = box.state
        state.add_user("alice", token="t-alice")
        state.add_user("coding-bot", token=TOKEN, bot=True)
        state.add_repo(REPO)
        state.set_permission(REPO, "alice", "write")
        state.set_permission(REPO, "coding-bot", "write")
        yield box


def _config(sandbox: GitHubSandbox, **overrides: object) -> GitHubConfig:
    settings: dict[str, object] = {
        "api_url": sandbox.url,
        "token": SecretStr(TOKEN),
        "owner": "acme",
        "repos": ["widgets"],
        "bot_name": "coding-bot",
    }
    settings.update(overrides)
    return GitHubConfig.model_validate(settings)


class RecordingSleep:
    """Records the waits retry_async asks for instead of waiting them out."""

    def __init__(self) -> None:
        self.waits: list[float] = []

    async def __call__(self, seconds: float) -> None:
        self.waits.append(seconds)


@pytest.fixture
async def source(sandbox: GitHubSandbox) -> AsyncIterator[GitHubSource]:
    github = GitHubSource(_config(sandbox), RetryPolicy(base_delay=0.01))
    yield github
    await github.aclose()


def _issue_key(number: int, project: str = REPO) -> TaskKey:
    return TaskKey("github", project, TaskKind.ISSUE, number)


def _pull_key(number: int, project: str = REPO) -> TaskKey:
    return TaskKey("github", project, TaskKind.CHANGE, number)


def test_github_source_implements_the_source_protocol(source: GitHubSource) -> None:
    assert isinstance(source, Source)
    assert source.forge == "github" and source.bot_name == "coding-bot"
    assert source.labels.bot_label == BOT_LABEL


# ------------------------------------------------------------------ discovery


async def test_discover_finds_open_labelled_issues_and_pulls_in_scope(
    sandbox: GitHubSandbox, source: GitHubSource
) -> None:
    state = sandbox.state
    state.add_repo("acme/elsewhere")
    issue = state.create_issue(REPO, "Fix it", "Please", "alice", labels=[BOT_LABEL])
    pull = state.create_pull(REPO, "Review me", "", "alice", head="topic", labels=[BOT_LABEL])
    state.create_issue(REPO, "No label", "", "alice")
    closed = state.create_issue(REPO, "Closed", "", "alice", labels=[BOT_LABEL])
    state.update_issue(REPO, closed, state="closed")
    state.create_issue("acme/elsewhere", "Out of scope", "", "alice", labels=[BOT_LABEL])

    tasks = {task.key: task for task in await source.discover()}

    assert set(tasks) == {_issue_key(issue), _pull_key(pull)}
    found = tasks[_issue_key(issue)]
    assert (found.title, found.body, found.author, found.labels) == ("Fix it", "Please", "alice", (BOT_LABEL,))
    assert found.url.endswith(f"/{REPO}/issues/{issue}")
    assert found.created_at.tzinfo is not None
    assert [r.path for r in sandbox.state.requests()] == ["/search/issues"]


async def test_discover_without_repos_searches_the_owner(sandbox: GitHubSandbox) -> None:
    sandbox.state.add_repo("acme/gadgets")
    sandbox.state.add_repo("other/tools")
    first = sandbox.state.create_issue(REPO, "one", labels=[BOT_LABEL])
    second = sandbox.state.create_issue("acme/gadgets", "two", labels=[BOT_LABEL])
    sandbox.state.create_issue("other/tools", "three", labels=[BOT_LABEL])
    github = GitHubSource(_config(sandbox, repos=[]), RetryPolicy(base_delay=0.01))
    try:
        keys = {task.key for task in await github.discover()}
    finally:
        await github.aclose()
    assert keys == {_issue_key(first), _issue_key(second, "acme/gadgets")}


async def test_discover_filters_by_assignee_and_extra_query(sandbox: GitHubSandbox) -> None:
    mine = sandbox.state.create_issue(REPO, "mine", labels=[BOT_LABEL], assignees=["coding-bot"])
    sandbox.state.create_issue(REPO, "not mine", labels=[BOT_LABEL])
    github = GitHubSource(_config(sandbox, assignee="coding-bot", query="archived:false"), RetryPolicy())
    try:
        assert [task.key for task in await github.discover()] == [_issue_key(mine)]
    finally:
        await github.aclose()
    assert sandbox.state.requests()[-1].params["q"].endswith("assignee:coding-bot archived:false")


async def test_discover_costs_the_same_requests_for_1_and_50_repositories(sandbox: GitHubSandbox) -> None:
    state = sandbox.state
    names = [f"repo{index:02d}" for index in range(50)]
    for name in names:
        state.add_repo(f"acme/{name}")
        state.create_issue(f"acme/{name}", f"task in {name}", labels=[BOT_LABEL])
    state.add_repo("acme/unlisted")
    state.create_issue("acme/unlisted", "not configured", labels=[BOT_LABEL])

    counts: dict[int, int] = {}
    found: dict[int, set[str]] = {}
    for size in (1, 50):
        github = GitHubSource(_config(sandbox, repos=names[:size]), RetryPolicy())
        state.clear_requests()
        try:
            tasks = await github.discover()
        finally:
            await github.aclose()
        counts[size] = len(state.requests())
        found[size] = {task.key.project for task in tasks}

    assert counts[1] == counts[50] == 1
    assert found[1] == {"acme/repo00"}
    assert found[50] == {f"acme/{name}" for name in names}


def test_search_query_widens_to_owners_when_repo_qualifiers_are_too_long() -> None:
    short = GitHubConfig(owner="acme", repos=["widgets", "other/tools"], assignee="bot", query="archived:false")
    query, keep = build_search_query(short)
    assert query == 'is:open label:"coding agent" repo:acme/widgets repo:other/tools assignee:bot archived:false'
    assert keep is None
    many = GitHubConfig(owner="acme", repos=[f"r{i}" for i in range(40)] + ["other/tools"])
    query, keep = build_search_query(many)
    assert query == 'is:open label:"coding agent" user:acme user:other'
    assert keep is not None and "acme/r39" in keep and "other/tools" in keep and len(keep) == 41


async def test_discover_follows_search_pagination(sandbox: GitHubSandbox, source: GitHubSource) -> None:
    numbers = {sandbox.state.create_issue(REPO, f"task {i}", labels=[BOT_LABEL]) for i in range(130)}
    tasks = await source.discover()
    assert {task.key.number for task in tasks} == numbers
    assert len(sandbox.state.requests()) == 2


# ------------------------------------------------------------------ snapshots and comments


async def test_get_task_reads_issue_and_pull_request(sandbox: GitHubSandbox, source: GitHubSource) -> None:
    issue = sandbox.state.create_issue(REPO, "Issue", "body", "alice", labels=[BOT_LABEL], assignees=["coding-bot"])
    pull = sandbox.state.create_pull(REPO, "PR", "pr body", "alice", head="feature/x", base="main")

    issue_task: Task = await source.get_task(_issue_key(issue))
    pull_task: Task = await source.get_task(_pull_key(pull))

    assert (issue_task.title, issue_task.assignees, issue_task.head_branch) == ("Issue", ("coding-bot",), None)
    assert (pull_task.title, pull_task.body, pull_task.head_branch, pull_task.base_branch) == (
        "PR",
        "pr body",
        "feature/x",
        "main",
    )
    assert pull_task.extra["head_repo"] == REPO and pull_task.key.is_change


async def test_list_comments_returns_all_150_in_order_and_rereads_cheaply(
    sandbox: GitHubSandbox, source: GitHubSource
) -> None:
    number = sandbox.state.create_issue(REPO, "chatty")
    for index in range(150):
        sandbox.state.add_comment(REPO, number, "alice", f"comment {index}")

    comments = await source.list_comments(_issue_key(number))
    assert [c.body for c in comments] == [f"comment {i}" for i in range(150)]
    assert all(c.author == "alice" and c.id.isdigit() for c in comments)
    assert len(sandbox.state.counted_requests()) == 2

    sandbox.state.clear_requests()
    again = await source.list_comments(_issue_key(number))
    assert again == comments
    assert [r.status for r in sandbox.state.requests()] == [304, 304]

    sandbox.state.add_comment(REPO, number, "alice", "one more")
    sandbox.state.clear_requests()
    latest = await source.list_comments(_issue_key(number))
    assert latest[-1].body == "one more" and len(latest) == 151
    assert [r.status for r in sandbox.state.requests()] == [304, 200]


async def test_comments_since_a_time_are_those_made_or_edited_at_or_after_it() -> None:
    now = [datetime(2025, 3, 1, 10, 0, tzinfo=timezone.utc)]
    with GitHubSandbox(GitHubState(clock=lambda: now[0])) as box:
        box.state.add_user("alice", token="t-alice")
        box.state.add_user("coding-bot", token=TOKEN, bot=True)
        box.state.add_repo(REPO)
        number = box.state.create_issue(REPO, "steered")
        old = box.state.add_comment(REPO, number, "alice", "old")
        now[0] += timedelta(minutes=1)
        box.state.add_comment(REPO, number, "alice", "newer")
        github = GitHubSource(_config(box), RetryPolicy(base_delay=0.01))
        try:
            half_way = datetime(2025, 3, 1, 10, 0, 30, 500_000, tzinfo=timezone.utc)
            assert [c.body for c in await github.list_comments(_issue_key(number), half_way)] == ["newer"]
            now[0] += timedelta(minutes=1)
            box.state.edit_comment(old, "old, edited")
            edited = await github.list_comments(_issue_key(number), half_way)
            assert [c.body for c in edited] == ["old, edited", "newer"]
            assert edited[1].created_at == datetime(2025, 3, 1, 10, 1, tzinfo=timezone.utc)
            assert await github.list_comments(_issue_key(number), now[0] + timedelta(seconds=1)) == []
            assert [c.body for c in await github.list_comments(_issue_key(number))] == ["old, edited", "newer"]
        finally:
            await github.aclose()


async def test_conditional_reads_keep_their_connection(sandbox: GitHubSandbox, source: GitHubSource) -> None:
    # Every step's checkpoint is a conditional read answered 304. Closing such an answer
    # before reading it to its end closed the connection: each checkpoint paid a new one
    # (a TCP handshake, and on a real forge a TLS one) on both sides.
    number = sandbox.state.create_issue(REPO, "kept")
    sandbox.state.add_comment(REPO, number, "alice", "hello")
    sandbox.state.clear_requests()
    for _ in range(4):
        await source.list_comments(_issue_key(number))
        await source.get_assignees(_issue_key(number))
    requests = sandbox.state.requests()
    assert [r.status for r in requests] == [200, 200] + [304] * 6
    assert len({r.client_port for r in requests}) == 1


def test_a_source_answers_on_each_event_loop_it_is_used_from(sandbox: GitHubSandbox) -> None:
    # The connections are aiohttp's, and an aiohttp session serves only the loop it was
    # made on: a source used from a second loop (as `asyncio.run` twice in one process,
    # each closing the source at its end) opens a pool there instead of failing on the first one's.
    number = sandbox.state.create_issue(REPO, "two loops")
    github = GitHubSource(_config(sandbox), RetryPolicy(retries=0))

    async def read_and_close() -> str:
        try:
            return (await github.get_task(_issue_key(number))).title
        finally:
            await github.aclose()

    assert asyncio.run(read_and_close()) == "two loops"
    assert asyncio.run(read_and_close()) == "two loops"
    requests = sandbox.state.requests()
    assert [r.status for r in requests] == [200, 200]
    assert requests[0].client_port != requests[1].client_port, "each loop's request came over a connection of its own"


async def test_an_edited_comment_is_listed_edited_though_unchanged_pages_are_not_parsed_again(
    sandbox: GitHubSandbox, source: GitHubSource
) -> None:
    # Listings whose body did not change reuse what they parsed to; an edit changes no
    # count and no id, only the body, so it is the change such reuse would miss.
    number = sandbox.state.create_issue(REPO, "edited")
    first = sandbox.state.add_comment(REPO, number, "alice", "before")
    sandbox.state.add_comment(REPO, number, "alice", "other")
    assert [c.body for c in await source.list_comments(_issue_key(number))] == ["before", "other"]
    assert [c.body for c in await source.list_comments(_issue_key(number))] == ["before", "other"]
    assert sandbox.state.requests()[-1].not_modified

    sandbox.state.edit_comment(first, "after")
    edited = await source.list_comments(_issue_key(number))
    assert [c.body for c in edited] == ["after", "other"]
    assert not sandbox.state.requests()[-1].not_modified
    assert [c.body for c in await source.list_comments(_issue_key(number))] == ["after", "other"]


async def test_assignees_and_labels_are_never_served_stale(sandbox: GitHubSandbox, source: GitHubSource) -> None:
    number = sandbox.state.create_issue(REPO, "steer", assignees=["coding-bot"])
    assert await source.get_assignees(_issue_key(number)) == ["coding-bot"]
    assert await source.get_assignees(_issue_key(number)) == ["coding-bot"]
    assert sandbox.state.requests()[-1].not_modified

    sandbox.state.unassign(REPO, number, "coding-bot", "alice")
    sandbox.state.add_label(REPO, number, "coding agent paused", "alice")
    assert await source.get_assignees(_issue_key(number)) == []
    assert (await source.get_task(_issue_key(number))).labels == ("coding agent paused",)


async def test_post_and_edit_comment(sandbox: GitHubSandbox, source: GitHubSource) -> None:
    number = sandbox.state.create_issue(REPO, "talk")
    posted = await source.post_comment(_issue_key(number), "Working on it")
    assert posted.author == "coding-bot" and posted.body == "Working on it"
    await source.edit_comment(_issue_key(number), posted.id, "Done")
    assert [(c.id, c.body) for c in sandbox.state.comments(REPO, number)] == [(int(posted.id), "Done")]


async def test_review_comments_are_grouped_into_threads(sandbox: GitHubSandbox, source: GitHubSource) -> None:
    state = sandbox.state
    pull = state.create_pull(REPO, "PR", head="topic")
    first = state.add_review_comment(REPO, pull, "alice", "Rename this", "src/a.py", 10)
    second = state.add_review_comment(REPO, pull, "alice", "Typo", "README.md", 3)
    state.add_review_comment(REPO, pull, "coding-bot", "Renamed", in_reply_to=first)

    threads = await source.list_threads(_pull_key(pull))
    assert [(t.id, t.path, t.line, [c.body for c in t.comments]) for t in threads] == [
        (str(first), "src/a.py", 10, ["Rename this", "Renamed"]),
        (str(second), "README.md", 3, ["Typo"]),
    ]
    assert {c.thread_id for c in threads[0].comments} == {str(first)}

    reply = await source.reply_in_thread(_pull_key(pull), str(second), "Fixed")
    assert reply.thread_id == str(second)
    assert state.review_comment(int(reply.id)).in_reply_to_id == second
    assert await source.list_threads(_issue_key(state.create_issue(REPO, "plain"))) == []


# ------------------------------------------------------------------ labels


async def test_add_label_creates_a_missing_label_once(sandbox: GitHubSandbox, source: GitHubSource) -> None:
    first = sandbox.state.create_issue(REPO, "one")
    second = sandbox.state.create_issue(REPO, "two")

    await source.add_label(_issue_key(first), "coding agent processing")
    created = [r for r in sandbox.state.requests() if r.target == f"POST /repos/{REPO}/labels"]
    assert len(created) == 1
    label = sandbox.state.label(REPO, "coding agent processing")
    assert label.color == "fbca04" and label.description

    sandbox.state.clear_requests()
    await source.add_label(_issue_key(second), "coding agent processing")
    assert [r.target for r in sandbox.state.requests()] == [f"POST /repos/{REPO}/issues/{second}/labels"]
    assert sandbox.state.issue(REPO, first).labels == ("coding agent processing",)
    assert sandbox.state.issue(REPO, second).labels == ("coding agent processing",)


async def test_runs_labelling_together_make_a_missing_label_once(sandbox: GitHubSandbox, source: GitHubSource) -> None:
    """A cycle's runs claim together: the first run's check-and-create serves them all."""
    numbers = [sandbox.state.create_issue(REPO, f"task {n}") for n in range(3)]

    await asyncio.gather(*(source.add_label(_issue_key(n), "coding agent processing") for n in numbers))

    targets = [r.target for r in sandbox.state.requests()]
    assert targets.count(f"GET /repos/{REPO}/labels/coding agent processing") == 1
    assert targets.count(f"POST /repos/{REPO}/labels") == 1
    assert all(sandbox.state.issue(REPO, n).labels == ("coding agent processing",) for n in numbers)


async def test_add_label_uses_an_existing_label_without_creating_it(
    sandbox: GitHubSandbox, source: GitHubSource
) -> None:
    sandbox.state.create_label(REPO, "coding agent done", "123456")
    number = sandbox.state.create_issue(REPO, "done")
    await source.add_label(_issue_key(number), "coding agent done")
    assert [r.target for r in sandbox.state.requests()] == [
        f"GET /repos/{REPO}/labels/coding agent done",
        f"POST /repos/{REPO}/issues/{number}/labels",
    ]
    assert sandbox.state.label(REPO, "coding agent done").color == "123456"
    assert sandbox.state.issue(REPO, number).labels == ("coding agent done",)


async def test_remove_label_removes_and_ignores_an_absent_label(sandbox: GitHubSandbox, source: GitHubSource) -> None:
    number = sandbox.state.create_issue(REPO, "labels", labels=[BOT_LABEL, "keep"])
    await source.remove_label(_issue_key(number), BOT_LABEL)
    await source.remove_label(_issue_key(number), "never there")
    assert sandbox.state.issue(REPO, number).labels == ("keep",)
    assert sandbox.state.requests()[-1].status == 404


async def test_label_names_with_slashes_and_spaces_round_trip(sandbox: GitHubSandbox, source: GitHubSource) -> None:
    number = sandbox.state.create_issue(REPO, "odd names")
    await source.add_label(_issue_key(number), "area/ci tools")
    assert sandbox.state.issue(REPO, number).labels == ("area/ci tools",)
    assert sandbox.state.label(REPO, "area/ci tools").description
    await source.remove_label(_issue_key(number), "area/ci tools")
    assert sandbox.state.issue(REPO, number).labels == ()


# ------------------------------------------------------------------ people


@pytest.mark.parametrize(
    ("level", "expected"),
    [
        ("admin", Permission.ADMIN),
        ("maintain", Permission.WRITE),
        ("write", Permission.WRITE),
        ("triage", Permission.READ),
        ("read", Permission.READ),
        (None, Permission.NONE),
    ],
)
async def test_permission_mapping(
    sandbox: GitHubSandbox, source: GitHubSource, level: str | None, expected: Permission
) -> None:
    sandbox.state.add_repo("acme/private", private=True)
    sandbox.state.set_permission("acme/private", "coding-bot", "read")
    sandbox.state.add_user("carol")
    sandbox.state.set_permission("acme/private", "carol", level)
    number = sandbox.state.create_issue("acme/private", "secret")
    assert await source.get_permission(_issue_key(number, "acme/private"), "carol") is expected


async def test_permission_of_an_unknown_user_is_none(sandbox: GitHubSandbox, source: GitHubSource) -> None:
    number = sandbox.state.create_issue(REPO, "who")
    assert await source.get_permission(_issue_key(number), "no-such-user") is Permission.NONE
    assert await source.get_permission(_issue_key(number), "acme") is Permission.ADMIN


async def test_find_trigger_user_is_the_actor_of_the_newest_label_event(
    sandbox: GitHubSandbox, source: GitHubSource
) -> None:
    state = sandbox.state
    state.add_user("mallory")
    number = state.create_issue(REPO, "trigger", author="mallory")
    state.add_label(REPO, number, "bug", "mallory")
    state.add_label(REPO, number, BOT_LABEL, "alice")
    state.remove_label(REPO, number, BOT_LABEL, "coding-bot")
    state.add_label(REPO, number, "other", "mallory")
    assert await source.find_trigger_user(_issue_key(number)) == "alice"

    state.add_user("dave")
    state.assign(REPO, number, "coding-bot", "dave")
    assert await source.find_trigger_user(_issue_key(number)) == "dave"


async def test_find_trigger_user_is_none_without_a_trigger(sandbox: GitHubSandbox, source: GitHubSource) -> None:
    number = sandbox.state.create_issue(REPO, "quiet", labels=["bug"], assignees=["alice"])
    assert await source.find_trigger_user(_issue_key(number)) is None


# ------------------------------------------------------------------ failures and retries


async def test_two_503s_then_success_is_retried(sandbox: GitHubSandbox, source: GitHubSource) -> None:
    number = sandbox.state.create_issue(REPO, "flaky", assignees=["alice"])
    sandbox.faults.add(Fault(pattern=rf"GET /repos/{REPO}/issues/{number}$", count=2, status=503))
    assert await source.get_assignees(_issue_key(number)) == ["alice"]
    assert [r.status for r in sandbox.state.requests()] == [503, 503, 200]
    assert sandbox.faults.injected == 2


async def test_429_retry_after_is_honoured(sandbox: GitHubSandbox) -> None:
    number = sandbox.state.create_issue(REPO, "busy")
    sandbox.faults.add(Fault(pattern=r"POST .*/comments$", count=1, status=429, retry_after=1))
    sleep = RecordingSleep()
    github = GitHubSource(_config(sandbox), RetryPolicy(base_delay=0.01), sleep=sleep)
    try:
        await github.post_comment(_issue_key(number), "hello")
    finally:
        await github.aclose()
    assert sleep.waits == [1.0]
    assert sandbox.faults.injected == 1
    assert [(r.method, r.status) for r in sandbox.state.requests()] == [("POST", 429), ("POST", 201)]
    # Stored with its hidden marker (sources/writes.py), which reading strips again.
    assert [strip_marker(c.body) for c in sandbox.state.comments(REPO, number)] == ["hello"]


async def test_exhausted_rate_limit_waits_until_the_reset(sandbox: GitHubSandbox) -> None:
    number = sandbox.state.create_issue(REPO, "limited", assignees=["alice"])
    sandbox.state.set_rate_limit(remaining=0, reset_in=30)
    sleep = RecordingSleep()
    github = GitHubSource(_config(sandbox), RetryPolicy(retries=1), sleep=sleep)
    try:
        with pytest.raises(TransientError) as failure:
            await github.get_assignees(_issue_key(number))
    finally:
        await github.aclose()
    assert len(sleep.waits) == 1 and 25 <= sleep.waits[0] <= 32
    assert failure.value.retry_after is not None and "HTTP 403" in str(failure.value)
    assert [r.status for r in sandbox.state.requests()] == [403, 403]


async def test_retries_are_bounded_and_the_last_error_escapes(sandbox: GitHubSandbox) -> None:
    number = sandbox.state.create_issue(REPO, "down")
    sandbox.faults.add(Fault(pattern=r"GET /repos/", count=10, status=502))
    sleep = RecordingSleep()
    github = GitHubSource(_config(sandbox), RetryPolicy(retries=3, base_delay=0.5, jitter=0), sleep=sleep)
    try:
        with pytest.raises(TransientError, match="HTTP 502"):
            await github.get_task(_issue_key(number))
    finally:
        await github.aclose()
    assert sleep.waits == [0.5, 1.0, 2.0]
    assert len(sandbox.state.requests()) == 4


async def test_not_found_is_a_forge_error_without_the_token(sandbox: GitHubSandbox, source: GitHubSource) -> None:
    with pytest.raises(ForgeError) as failure:
        await source.get_task(_issue_key(404))
    message = str(failure.value)
    assert isinstance(failure.value, GitHubNotFoundError)
    assert f"GET /repos/{REPO}/issues/404" in message and "404" in message
    assert TOKEN not in message and "Authorization" not in message
    assert len(sandbox.state.requests()) == 1  # a 404 is not retried


async def test_bad_token_is_a_forge_error(sandbox: GitHubSandbox) -> None:
    github = GitHubSource(_config(sandbox, token=SecretStr("wrong-token-value")), RetryPolicy())
    try:
        with pytest.raises(ForgeError) as failure:
            await github.discover()
    finally:
        await github.aclose()
    assert "HTTP 401" in str(failure.value) and "wrong-token-value" not in str(failure.value)


def _closed_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


async def test_connection_refused_is_transient() -> None:
    config = GitHubConfig(api_url=f"http://127.0.0.1:{_closed_port()}", token=SecretStr(TOKEN), owner="acme")
    sleep = RecordingSleep()
    github = GitHubSource(config, RetryPolicy(retries=2, base_delay=0.01), sleep=sleep)
    started = time.monotonic()
    try:
        with pytest.raises(TransientError, match="connection error") as failure:
            await github.discover()
    finally:
        await github.aclose()
    assert len(sleep.waits) == 2 and time.monotonic() - started < 10
    assert TOKEN not in str(failure.value)


class ForwardingProxy:
    """A plain-HTTP forward proxy on loopback, as a company network puts in front of the
    internet: it forwards absolute-form requests (`GET http://host:port/path`) one per
    connection and records their targets."""

    def __init__(self, set_cookie: str | None = None) -> None:
        self.targets: list[str] = []
        self.cookies: list[str] = []  # the Cookie header of each request (empty: none)
        self._set_cookie = set_cookie
        self._server: asyncio.AbstractServer | None = None

    async def __aenter__(self) -> str:
        self._server = await asyncio.start_server(self._forward, "127.0.0.1", 0)
        return f"http://127.0.0.1:{self._server.sockets[0].getsockname()[1]}"

    async def __aexit__(self, *exc_info: object) -> None:
        assert self._server is not None
        self._server.close()
        await self._server.wait_closed()

    async def _forward(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        head = (await reader.readuntil(b"\r\n\r\n")).decode("latin-1")
        request_line, *header_lines = head.split("\r\n")
        method, target, version = request_line.split(" ")
        self.targets.append(f"{method} {target}")
        self.cookies.append(", ".join(line.split(":", 1)[1].strip() for line in header_lines if line.lower().startswith("cookie:")))
        origin, _, path = target.removeprefix("http://").partition("/")
        host, _, port = origin.partition(":")
        headers = [line for line in header_lines if line and not line.lower().startswith(("connection:", "proxy-"))]
        length = next((int(line.split(":", 1)[1]) for line in headers if line.lower().startswith("content-length:")), 0)
        body = await reader.readexactly(length) if length else b""
        upstream_reader, upstream_writer = await asyncio.open_connection(host, int(port))
        request = "\r\n".join([f"{method} /{path} {version}", *headers, "Connection: close", "", ""])
        upstream_writer.write(request.encode("latin-1") + body)
        await upstream_writer.drain()
        answer = await upstream_reader.read()
        if self._set_cookie is not None:  # as a load balancer's affinity cookie
            status_line, _, rest = answer.partition(b"\r\n")
            answer = status_line + f"\r\nSet-Cookie: {self._set_cookie}; Path=/".encode() + b"\r\n" + rest
        writer.write(answer)
        await writer.drain()
        upstream_writer.close()
        writer.close()


def _behind_proxy(monkeypatch: pytest.MonkeyPatch, proxy_url: str, no_proxy: str | None = None) -> None:
    """`HTTP_PROXY` names `proxy_url` (and `NO_PROXY`, `no_proxy`), and no other proxy
    variable of the machine's environment is in force."""
    for name in ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "NO_PROXY"):
        monkeypatch.delenv(name, raising=False)
        monkeypatch.delenv(name.lower(), raising=False)
    monkeypatch.setenv("HTTP_PROXY", proxy_url)
    if no_proxy is not None:
        monkeypatch.setenv("NO_PROXY", no_proxy)


@pytest.mark.parametrize("bypassed", [False, True], ids=["through the proxy", "NO_PROXY"])
async def test_the_forge_is_reached_through_the_proxy_the_environment_names(
    sandbox: GitHubSandbox, monkeypatch: pytest.MonkeyPatch, bypassed: bool
) -> None:
    # git, python-gitlab and the model client honour HTTP(S)_PROXY and NO_PROXY; the
    # GitHub client must too, or behind a company proxy the clone works and the API does not.
    number = sandbox.state.create_issue(REPO, "behind a proxy")
    proxy = ForwardingProxy()
    async with proxy as proxy_url:
        _behind_proxy(monkeypatch, proxy_url, no_proxy="localhost,127.0.0.1" if bypassed else None)
        github = GitHubSource(_config(sandbox), RetryPolicy(retries=0))
        try:
            task = await github.get_task(_issue_key(number))
        finally:
            await github.aclose()
    assert task.title == "behind a proxy"
    expected = [] if bypassed else [f"GET {sandbox.url}/repos/{REPO}/issues/{number}"]
    assert proxy.targets == expected


async def test_a_cookie_an_answer_sets_rides_on_no_later_request(sandbox: GitHubSandbox, monkeypatch: pytest.MonkeyPatch) -> None:
    # The connection pool outlives every request: a cookie jar in it would carry what one
    # answer set (a load balancer's affinity, a session) on every later request.
    number = sandbox.state.create_issue(REPO, "cookies")
    proxy = ForwardingProxy(set_cookie="affinity=node-7")
    async with proxy as proxy_url:
        _behind_proxy(monkeypatch, proxy_url)
        # By name: a cookie jar keeps no cookie of a bare IP address.
        by_name = sandbox.url.replace("127.0.0.1", "localhost")
        github = GitHubSource(_config(sandbox, api_url=by_name), RetryPolicy(retries=0))
        try:
            for _ in range(2):
                await github.get_task(_issue_key(number))
        finally:
            await github.aclose()
    assert len(proxy.targets) == 2
    assert proxy.cookies == ["", ""]


async def test_the_answer_cache_keeps_at_most_its_bytes(sandbox: GitHubSandbox, source: GitHubSource) -> None:
    # Bounded by entries alone, the cache kept up to 1,024 answers however large: a bot
    # with many open PRs kept every page of their searches. Twelve 1 MB issues are more
    # than its 8 MiB: the first read is forgotten (its re-read is a plain 200), the last kept (304).
    size = 1024 * 1024
    numbers = [sandbox.state.create_issue(REPO, f"big {index}", "x" * size) for index in range(12)]
    for number in numbers:
        await source.get_task(_issue_key(number))
    sandbox.state.clear_requests()
    last = await source.get_task(_issue_key(numbers[-1]))
    first = await source.get_task(_issue_key(numbers[0]))
    assert len(last.body) == len(first.body) == size
    assert [r.status for r in sandbox.state.requests()] == [304, 200]


async def test_a_lookup_shared_by_two_runs_answers_both_when_its_first_asker_has_left_its_session(
    sandbox: GitHubSandbox, source: GitHubSource
) -> None:
    """The bot's identity is asked once for all runs (`LifetimeAnswers`). The run that
    asked first ended, leaving its `Source.session`, while the answer was still out (a
    503 to retry): the run still waiting for the same answer gets it, the retry not made
    through the HTTP client the first run's session closed."""
    gate = threading.Event()
    sandbox.faults.add(Fault(r"^GET /user$", status=503, hold=gate))

    async def first_run() -> None:
        async with source.session():
            asking = asyncio.create_task(source.git_identity(None))
            await wait_until(lambda: sandbox.faults.injected > 0, 30, "the identity's request to be held")
            asking.cancel()  # the run ended

    await first_run()
    waiting = asyncio.create_task(source.git_identity(None))
    gate.set()
    identity = await asyncio.wait_for(waiting, 30)
    assert identity.name and identity.email
    assert [r.path for r in sandbox.state.requests() if r.path == "/user"] == ["/user", "/user"]


async def test_a_parsed_answer_leaves_no_string_behind_in_the_json_parser(
    sandbox: GitHubSandbox, source: GitHubSource
) -> None:
    """pydantic's JSON parser keeps each short string it made in a process-wide cache
    (16,384 places) unless told not to. A `serve` reads forge answers for ever: such
    strings, made among a request's short-lived objects and then held by the parser for
    thousands of requests, were the only objects `bench_soak.py --trace` found alive,
    out of the collector's sight and growing in number (docs/performance.md). Once the
    task is dropped, nothing else holds its title."""
    title = f"Probe {secrets.token_hex(8)}"
    number = sandbox.state.create_issue(REPO, title, "body", author="alice")
    task = await source.get_task(_issue_key(number))
    assert task.title == title
    gc.collect()
    holders = sys.getrefcount(task.title) - 1  # less the call's own reference
    assert holders == 1, "something besides the task holds the title it read"

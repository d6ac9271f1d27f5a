"""`GitLabSource` against the GitLab testing server: real HTTP through python-gitlab."""

from __future__ import annotations

import asyncio
import re
import time
from collections.abc import AsyncIterator, Callable, Iterator
from typing import Any

import httpx
import pytest

from coding_agent.config import GitLabConfig
from coding_agent.domain.tasks import Permission, TaskKey, TaskKind
from coding_agent.errors import ForgeError, TransientError
from coding_agent.retry import RetryPolicy
from coding_agent.sandbox.faults import Fault
from coding_agent.sources.base import Source
from coding_agent.sources.gitlab import GitLabSource, instance_url, permission_for_access_level
from tests.support.gitlab import DEVELOPER, GUEST, MAINTAINER, OWNER, REPORTER, GitLabSandbox

PROJECT = "team/app"
TOKEN = "glpat-agent-secret-123"
BOT_LABEL = "coding agent"
FAST = RetryPolicy(retries=3, base_delay=0.01, max_delay=2.0)

SourceFactory = Callable[..., GitLabSource]


@pytest.fixture()
def sandbox() -> Iterator[GitLabSandbox]:
    with GitLabSandbox() as sandbox:
        state = sandbox.state
        state.add_user("agent-bot", token=TOKEN, bot=True)
        for name in ("alice", "bob", "carol", "dave", "erin", "frank"):
            state.add_user(name)
        state.add_project(PROJECT)
        yield sandbox


@pytest.fixture()
async def make_source(sandbox: GitLabSandbox) -> AsyncIterator[SourceFactory]:
    made: list[GitLabSource] = []

    def make(retry: RetryPolicy = FAST, **settings: Any) -> GitLabSource:
        settings.setdefault("api_url", sandbox.url + "/api/v4")
        settings.setdefault("token", TOKEN)
        settings.setdefault("bot_name", "agent-bot")
        if "project_id" not in settings:
            settings.setdefault("group", "team")
        source = GitLabSource(GitLabConfig(**settings), retry)
        made.append(source)
        return source

    yield make
    for source in made:
        await source.aclose()


def issue_key(iid: int, project: str = PROJECT) -> TaskKey:
    return TaskKey("gitlab", project, TaskKind.ISSUE, iid)


def mr_key(iid: int, project: str = PROJECT) -> TaskKey:
    return TaskKey("gitlab", project, TaskKind.CHANGE, iid)


def test_instance_url_accepts_api_suffix_or_not() -> None:
    assert instance_url("https://gitlab.example.com/api/v4/") == "https://gitlab.example.com"
    assert instance_url("https://gitlab.example.com/api/v4") == "https://gitlab.example.com"
    assert instance_url("https://gitlab.example.com/") == "https://gitlab.example.com"
    assert instance_url("https://host/gitlab") == "https://host/gitlab"


async def test_source_satisfies_the_protocol(make_source: SourceFactory) -> None:
    source = make_source()
    assert isinstance(source, Source)
    assert source.forge == "gitlab" and source.bot_name == "agent-bot"
    assert source.labels.bot_label == BOT_LABEL


async def test_discover_returns_labelled_open_issues_and_merge_requests(
    sandbox: GitLabSandbox, make_source: SourceFactory
) -> None:
    state = sandbox.state
    state.add_project("team/sub/lib")
    issue = state.create_issue(PROJECT, "Do it", "details", "alice", labels=[BOT_LABEL, "bug"], assignees=["bob"])
    state.create_issue(PROJECT, "Not for the bot", author="alice", labels=["bug"])
    closed = state.create_issue(PROJECT, "Closed", author="alice", labels=[BOT_LABEL])
    state.set_state(PROJECT, closed, "closed")
    nested = state.create_issue("team/sub/lib", "Nested", author="alice", labels=[BOT_LABEL])
    mr = state.create_merge_request(
        PROJECT, "Review me", author="carol", source_branch="feat", target_branch="develop", labels=[BOT_LABEL]
    )
    state.add_project("other/app")
    state.create_issue("other/app", "Other group", author="alice", labels=[BOT_LABEL])

    tasks = await make_source().discover()

    assert {str(task.key) for task in tasks} == {
        f"gitlab:{PROJECT}#{issue}",
        f"gitlab:team/sub/lib#{nested}",
        f"gitlab:{PROJECT}!{mr}",
    }
    by_key = {str(task.key): task for task in tasks}
    first = by_key[f"gitlab:{PROJECT}#{issue}"]
    assert (first.title, first.body, first.author, first.state) == ("Do it", "details", "alice", "open")
    assert first.labels == (BOT_LABEL, "bug") and first.assignees == ("bob",)
    assert first.url.endswith(f"/{PROJECT}/-/issues/{issue}")
    change = by_key[f"gitlab:{PROJECT}!{mr}"]
    assert change.key.kind is TaskKind.CHANGE
    assert (change.head_branch, change.base_branch) == ("feat", "develop")


async def test_discover_costs_the_same_requests_for_1_or_50_projects(
    sandbox: GitLabSandbox, make_source: SourceFactory
) -> None:
    state = sandbox.state

    def seed(group: str, projects: int) -> None:
        for number in range(projects):
            path = f"{group}/repo-{number}"
            state.add_project(path)
            state.create_issue(path, "task", author="alice", labels=[BOT_LABEL])
            state.create_merge_request(path, "change", author="alice", source_branch="b", labels=[BOT_LABEL])

    seed("small", 1)
    seed("large", 50)
    state.clear_requests()
    small = await make_source(group="small").discover()
    small_cost = len(state.requests())
    state.clear_requests()
    large = await make_source(group="large").discover()
    large_cost = len(state.requests())

    assert len(small) == 2 and len(large) == 100
    assert small_cost == large_cost == 2
    assert all("/groups/" in record.path for record in state.requests())


@pytest.mark.parametrize("use_numeric_id", [True, False])
async def test_discover_in_project_scope(
    sandbox: GitLabSandbox, make_source: SourceFactory, use_numeric_id: bool
) -> None:
    state = sandbox.state
    state.add_project("team/other")
    mine = state.create_issue(PROJECT, "mine", author="alice", labels=[BOT_LABEL])
    state.create_issue("team/other", "not this project", author="alice", labels=[BOT_LABEL])
    project_id: int | str = state.require_project(PROJECT).id if use_numeric_id else PROJECT

    tasks = await make_source(project_id=project_id).discover()

    assert [task.key for task in tasks] == [issue_key(mine)]
    assert all("/projects/" in record.path for record in state.requests())


async def test_discover_with_assignee_filter(sandbox: GitLabSandbox, make_source: SourceFactory) -> None:
    state = sandbox.state
    assigned = state.create_issue(PROJECT, "assigned", author="alice", labels=[BOT_LABEL], assignees=["agent-bot"])
    state.create_issue(PROJECT, "unassigned", author="alice", labels=[BOT_LABEL])

    tasks = await make_source(assignee="agent-bot").discover()

    assert [task.key.number for task in tasks] == [assigned]


async def test_get_task_and_fresh_assignees(sandbox: GitLabSandbox, make_source: SourceFactory) -> None:
    state = sandbox.state
    iid = state.create_merge_request(
        PROJECT, "MR", "body", "alice", source_branch="topic", labels=[BOT_LABEL], assignees=["agent-bot", "bob"]
    )
    source = make_source()

    task = await source.get_task(mr_key(iid))
    assert task.key == mr_key(iid)
    assert task.assignees == ("agent-bot", "bob")
    assert (task.head_branch, task.base_branch) == ("topic", "main")
    assert await source.get_assignees(mr_key(iid)) == ["agent-bot", "bob"]

    state.clear_requests()
    assert await source.get_assignees(mr_key(iid)) == ["agent-bot", "bob"]
    assert [record.status for record in state.requests()] == [304]

    state.unassign(PROJECT, iid, "agent-bot", actor="alice", kind="mr")
    assert await source.get_assignees(mr_key(iid)) == ["bob"]


async def test_list_comments_pages_through_150_notes_in_order_and_revalidates_cheaply(
    sandbox: GitLabSandbox, make_source: SourceFactory
) -> None:
    state = sandbox.state
    iid = state.create_issue(PROJECT, "Chatty", author="alice")
    for number in range(150):
        state.add_note(PROJECT, iid, "bob" if number % 2 else "alice", f"comment {number}")
    state.add_label(PROJECT, iid, "some label", actor="alice")  # a system note, never a comment
    source = make_source()

    comments = await source.list_comments(issue_key(iid))
    assert [comment.body for comment in comments] == [f"comment {number}" for number in range(150)]
    assert comments[1].author == "bob" and comments[0].id == str(state.notes(PROJECT, iid)[0].id)

    state.clear_requests()
    assert len(await source.list_comments(issue_key(iid))) == 150
    assert [record.status for record in state.requests()] == [304]

    state.add_note(PROJECT, iid, "carol", "a new one")
    first_id = state.notes(PROJECT, iid)[0].id
    state.update_note(PROJECT, iid, first_id, "comment 0, edited")
    state.clear_requests()
    latest = await source.list_comments(issue_key(iid))
    assert latest[0].body == "comment 0, edited"
    assert latest[-1].body == "a new one" and len(latest) == 151
    assert [record.status for record in state.requests()] == [200]


async def test_comments_since_a_time_are_those_made_or_edited_at_or_after_it(
    sandbox: GitLabSandbox, make_source: SourceFactory
) -> None:
    state = sandbox.state
    iid = state.create_issue(PROJECT, "Steered", author="alice")
    for body in ("first", "second", "third"):
        state.add_note(PROJECT, iid, "alice", body)
    first, second, _ = state.notes(PROJECT, iid, system=False)
    source = make_source()

    assert [c.body for c in await source.list_comments(issue_key(iid), second.created_at)] == ["second", "third"]
    state.update_note(PROJECT, iid, first.id, "first, edited")
    since = await source.list_comments(issue_key(iid), second.created_at)
    assert [c.body for c in since] == ["first, edited", "second", "third"]
    assert [c.body for c in await source.list_comments(issue_key(iid))] == ["first, edited", "second", "third"]


async def test_merge_request_comments_and_threads(sandbox: GitLabSandbox, make_source: SourceFactory) -> None:
    state = sandbox.state
    iid = state.create_merge_request(PROJECT, "Threads", author="alice", source_branch="t")
    state.add_note(PROJECT, iid, "alice", "top-level", kind="mr")
    position = {"position_type": "text", "new_path": "src/app.py", "new_line": 7}
    thread_id = state.add_discussion(PROJECT, iid, "bob", "why?", position=position)
    state.reply_to_discussion(PROJECT, iid, thread_id, "alice", "because")
    state.add_label(PROJECT, iid, "x", actor="alice", kind="mr")
    source = make_source()

    assert [comment.body for comment in await source.list_comments(mr_key(iid))] == ["top-level"]
    threads = await source.list_threads(mr_key(iid))
    assert len(threads) == 1
    thread = threads[0]
    assert thread.id == thread_id and (thread.path, thread.line) == ("src/app.py", 7)
    assert [(c.author, c.body, c.thread_id) for c in thread.comments] == [
        ("bob", "why?", thread_id),
        ("alice", "because", thread_id),
    ]
    issue = state.create_issue(PROJECT, "no threads", author="alice")
    assert await source.list_threads(issue_key(issue)) == []


async def test_post_and_edit_comment(sandbox: GitLabSandbox, make_source: SourceFactory) -> None:
    state = sandbox.state
    iid = state.create_issue(PROJECT, "Talk", author="alice")
    source = make_source()

    posted = await source.post_comment(issue_key(iid), "Working on it")
    assert posted.author == "agent-bot" and posted.body == "Working on it"
    await source.edit_comment(issue_key(iid), posted.id, "Done")
    assert [(str(note.id), note.body) for note in state.notes(PROJECT, iid)] == [(posted.id, "Done")]


QUICK_ACTIONS = "Looks done.\n/merge\n/approve\n/label ~x\n/assign @bob\n  /close\n> /unassign @agent-bot\nThat is all."
# A line GitLab could take for a command: `/word` at its start; blanks and `>` too, to be strict.
COMMAND_LINE = re.compile(r"^[\s>]*/\w", re.MULTILINE)


async def test_notes_run_no_quick_action_and_read_back_as_written(sandbox: GitLabSandbox, make_source: SourceFactory) -> None:
    state = sandbox.state
    iid = state.create_merge_request(PROJECT, "Review", author="alice", source_branch="review")
    thread_id = state.add_discussion(PROJECT, iid, "alice", "And this?")
    source = make_source()

    posted = await source.post_comment(mr_key(iid), QUICK_ACTIONS)
    await source.edit_comment(mr_key(iid), posted.id, "Edited.\n" + QUICK_ACTIONS)
    reply = await source.reply_in_thread(mr_key(iid), thread_id, QUICK_ACTIONS)

    mr = state.merge_request(PROJECT, iid)
    assert mr.quick_actions == [] and mr.state == "opened" and mr.approved_by == [] and "x" not in mr.labels
    stored = [note.body for note in state.notes(PROJECT, iid, kind="mr", system=False)]
    assert all(COMMAND_LINE.search(body) is None for body in stored), stored
    assert posted.body == QUICK_ACTIONS and reply.body == QUICK_ACTIONS
    [comment] = await source.list_comments(mr_key(iid))
    assert comment.body == "Edited.\n" + QUICK_ACTIONS, "read back as it was written"
    [thread] = await source.list_threads(mr_key(iid))
    assert thread.comments[-1].body == QUICK_ACTIONS


async def test_merge_request_title_and_description_run_no_quick_action(
    sandbox: GitLabSandbox, make_source: SourceFactory
) -> None:
    state = sandbox.state
    state.create_branch(PROJECT, "coding-agent/1-x")
    source = make_source()

    opened = await source.open_change(PROJECT, "coding-agent/1-x", "main", "draft: x\n/merge", QUICK_ACTIONS)
    created = state.merge_request(PROJECT, opened.number)
    updated = await source.update_change(PROJECT, opened.number, "Updated.\n" + QUICK_ACTIONS)
    found = await source.find_open_change(PROJECT, "coding-agent/1-x")

    mr = state.merge_request(PROJECT, opened.number)
    assert mr.quick_actions == [] and mr.state == "opened" and mr.approved_by == [] and "x" not in mr.labels
    assert COMMAND_LINE.search(created.description) is None and COMMAND_LINE.search(mr.description) is None
    assert COMMAND_LINE.search(mr.title) is None
    assert opened.body == QUICK_ACTIONS and updated.body == found.body == "Updated.\n" + QUICK_ACTIONS  # type: ignore[union-attr]


async def test_the_sandbox_runs_quick_actions_as_gitlab_does(sandbox: GitLabSandbox) -> None:
    """The attack the tests above guard against works on the sandbox: as the note's author."""
    state = sandbox.state
    iid = state.create_merge_request(PROJECT, "Review", author="alice", source_branch="review", assignees=["agent-bot"])
    url = f"{sandbox.url}/api/v4/projects/{PROJECT.replace('/', '%2F')}/merge_requests/{iid}/notes"
    async with httpx.AsyncClient() as client:
        answer = await client.post(url, headers={"PRIVATE-TOKEN": TOKEN}, json={"body": QUICK_ACTIONS})
    assert answer.status_code == 201

    mr = state.merge_request(PROJECT, iid)
    assert mr.quick_actions == ["/merge", "/approve", "/label ~x", "/assign @bob"]
    assert mr.state == "merged" and mr.approved_by == [state.require_user("agent-bot").id] and "x" in mr.labels
    assert state.assignees_of(PROJECT, iid, kind="mr") == ["agent-bot", "bob"]
    assert answer.json()["body"] == "Looks done.\n  /close\n> /unassign @agent-bot\nThat is all.", "run lines leave the note"


@pytest.mark.parametrize(
    ("level", "expected"),
    [
        (GUEST, Permission.READ),
        (REPORTER, Permission.READ),
        (DEVELOPER, Permission.WRITE),
        (MAINTAINER, Permission.ADMIN),
        (OWNER, Permission.ADMIN),
        (None, Permission.NONE),
    ],
)
async def test_permission_for_each_access_level(
    sandbox: GitLabSandbox, make_source: SourceFactory, level: int | None, expected: Permission
) -> None:
    sandbox.state.set_access(PROJECT, "alice", level)
    iid = sandbox.state.create_issue(PROJECT, "perm", author="bob")
    assert await make_source().get_permission(issue_key(iid), "alice") is expected


async def test_permission_inherited_from_group_and_unknown_user(
    sandbox: GitLabSandbox, make_source: SourceFactory
) -> None:
    sandbox.state.set_access("team", "erin", DEVELOPER)
    iid = sandbox.state.create_issue(PROJECT, "perm", author="bob")
    source = make_source()
    assert await source.get_permission(issue_key(iid), "erin") is Permission.WRITE
    assert await source.get_permission(issue_key(iid), "ghost") is Permission.NONE
    assert permission_for_access_level(5) is Permission.NONE


async def test_find_trigger_user_is_who_last_added_the_bot_label(
    sandbox: GitLabSandbox, make_source: SourceFactory
) -> None:
    state = sandbox.state
    iid = state.create_issue(PROJECT, "Trigger", author="alice")
    source = make_source()
    assert await source.find_trigger_user(issue_key(iid)) is None

    state.add_label(PROJECT, iid, BOT_LABEL, actor="carol")
    state.add_label(PROJECT, iid, "unrelated", actor="dave")
    assert await source.find_trigger_user(issue_key(iid)) == "carol"

    state.remove_label(PROJECT, iid, BOT_LABEL, actor="agent-bot")
    state.add_label(PROJECT, iid, BOT_LABEL, actor="frank")
    assert await source.find_trigger_user(issue_key(iid)) == "frank"


async def test_add_label_creates_missing_label_once_and_keeps_other_labels(
    sandbox: GitLabSandbox, make_source: SourceFactory
) -> None:
    state = sandbox.state
    first = state.create_issue(PROJECT, "one", author="alice", labels=[BOT_LABEL, "bug"])
    second = state.create_issue(PROJECT, "two", author="alice", labels=[BOT_LABEL])
    source = make_source()
    snapshot = await source.get_task(issue_key(first))
    assert snapshot.labels == (BOT_LABEL, "bug")
    state.add_label(PROJECT, first, "added meanwhile", actor="bob")  # after the snapshot, before the write
    state.clear_requests()

    await source.add_label(issue_key(first), "coding agent processing")
    await source.add_label(issue_key(second), "coding agent processing")

    assert state.labels_of(PROJECT, first) == [BOT_LABEL, "bug", "added meanwhile", "coding agent processing"]
    assert state.labels_of(PROJECT, second) == [BOT_LABEL, "coding agent processing"]
    assert state.count_requests("POST", "/labels") == 1
    assert state.count_requests("GET", "/labels") == 1
    label = state.require_project(PROJECT).labels["coding agent processing"]
    assert label.color == "#1f75cb"


async def test_runs_labelling_together_list_the_labels_once(sandbox: GitLabSandbox, make_source: SourceFactory) -> None:
    """A cycle's runs claim together: the first run's listing (and creation) serves them all."""
    state = sandbox.state
    iids = [state.create_issue(PROJECT, f"task {n}", author="alice") for n in range(3)]
    source = make_source()
    state.clear_requests()

    await asyncio.gather(*(source.add_label(issue_key(iid), "coding agent processing") for iid in iids))

    assert state.count_requests("GET", "/labels") == 1
    assert state.count_requests("POST", "/labels") == 1
    assert all(state.labels_of(PROJECT, iid) == ["coding agent processing"] for iid in iids)


async def test_add_label_tolerates_a_label_created_meanwhile(
    sandbox: GitLabSandbox, make_source: SourceFactory
) -> None:
    state = sandbox.state
    iid = state.create_issue(PROJECT, "race", author="alice")
    source = make_source()
    await source.add_label(issue_key(iid), "first")  # learns the project's labels
    state.create_label(PROJECT, "made elsewhere")
    await source.add_label(issue_key(iid), "made elsewhere")
    assert state.labels_of(PROJECT, iid) == ["first", "made elsewhere"]


async def test_remove_label_present_or_absent(sandbox: GitLabSandbox, make_source: SourceFactory) -> None:
    state = sandbox.state
    iid = state.create_issue(PROJECT, "labels", author="alice", labels=[BOT_LABEL, "keep"])
    source = make_source()
    await source.remove_label(issue_key(iid), BOT_LABEL)
    await source.remove_label(issue_key(iid), "never there")
    assert state.labels_of(PROJECT, iid) == ["keep"]


async def test_503_twice_then_success(sandbox: GitLabSandbox, make_source: SourceFactory) -> None:
    iid = sandbox.state.create_issue(PROJECT, "flaky", author="alice")
    sandbox.faults.add(Fault(r"GET /api/v4/projects/.*/issues/\d+$", count=2, status=503))

    task = await make_source(retry=RetryPolicy(base_delay=0.01)).get_task(issue_key(iid))

    assert task.title == "flaky"
    assert [record.status for record in sandbox.state.requests()] == [503, 503, 200]


async def test_503_beyond_the_retries_raises_transient_error(
    sandbox: GitLabSandbox, make_source: SourceFactory
) -> None:
    iid = sandbox.state.create_issue(PROJECT, "down", author="alice")
    sandbox.faults.add(Fault(r"/issues/\d+$", count=5, status=502))
    with pytest.raises(TransientError, match="HTTP 502"):
        await make_source(retry=RetryPolicy(retries=2, base_delay=0.01)).get_task(issue_key(iid))
    assert len(sandbox.state.requests()) == 3


async def test_429_retry_after_is_honoured(sandbox: GitLabSandbox, make_source: SourceFactory) -> None:
    iid = sandbox.state.create_issue(PROJECT, "limited", author="alice")
    sandbox.faults.add(Fault(r"PUT /api/v4/projects/.*/issues/\d+$", count=1, status=429, retry_after=1))
    source = make_source(retry=RetryPolicy(base_delay=0.01, max_delay=5.0))

    started = time.monotonic()
    await source.remove_label(issue_key(iid), "whatever")
    elapsed = time.monotonic() - started

    assert elapsed >= 0.95  # the server's 1 s, not the policy's 0.01 s
    assert [record.status for record in sandbox.state.requests()] == [429, 200]


async def test_404_raises_forge_error_without_the_token(sandbox: GitLabSandbox, make_source: SourceFactory) -> None:
    source = make_source()
    with pytest.raises(ForgeError) as caught:
        await source.get_task(issue_key(4242))
    message = str(caught.value)
    assert "404" in message and "/issues/4242" in message
    assert TOKEN not in message
    assert len(sandbox.state.requests()) == 1  # a 404 is not retried


async def test_bad_token_raises_forge_error_without_the_token(
    sandbox: GitLabSandbox, make_source: SourceFactory
) -> None:
    source = make_source(token="glpat-wrong-token-value")
    with pytest.raises(ForgeError) as caught:
        await source.discover()
    assert "401" in str(caught.value) and "glpat-wrong-token-value" not in str(caught.value)


async def test_connection_refused_is_transient(make_source: SourceFactory) -> None:
    source = make_source(api_url="http://127.0.0.1:9", retry=RetryPolicy(retries=1, base_delay=0.01))
    with pytest.raises(TransientError, match="connection failed"):
        await source.discover()


async def test_the_answer_cache_keeps_at_most_its_bytes(sandbox: GitLabSandbox, make_source: SourceFactory) -> None:
    # Twelve 1 MB issues are more than the cache's 8 MiB: the first read is forgotten
    # (its re-read is a plain 200), the last kept (304).
    state = sandbox.state
    iids = [state.create_issue(PROJECT, f"big {index}", "x" * 1024 * 1024, "alice") for index in range(12)]
    source = make_source()
    for iid in iids:
        await source.get_assignees(issue_key(iid))
    state.clear_requests()
    await source.get_assignees(issue_key(iids[-1]))
    await source.get_assignees(issue_key(iids[0]))
    assert [record.status for record in state.requests()] == [304, 200]


async def test_the_answer_cache_weighs_notes_as_parsed_not_as_received(
    sandbox: GitLabSandbox, make_source: SourceFactory
) -> None:
    # 100 issues of 100 short notes: 4.4 MB as received, under the cache's 8 MiB, and about
    # 13 MB once parsed (each note a dict of strings, its author another). Weighed as received,
    # every listing stayed (the first one's re-read was a 304), holding more than the cap.
    state = sandbox.state
    iids = [state.create_issue(PROJECT, f"chatty {index}", author="alice") for index in range(100)]
    for iid in iids:
        for number in range(100):
            state.add_note(PROJECT, iid, "bob", f"note {number}")
    source = make_source()
    for iid in iids:
        assert len(await source.list_comments(issue_key(iid))) == 100
    state.clear_requests()
    await source.list_comments(issue_key(iids[-1]))
    await source.list_comments(issue_key(iids[0]))
    assert [record.status for record in state.requests()] == [304, 200]

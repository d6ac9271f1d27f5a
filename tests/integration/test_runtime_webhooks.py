"""The webhook endpoints (SPEC 11.2): signatures, size, duplicates, scope, and what a
valid GitHub or GitLab event asks of the runtime. Payloads are shaped like the forges'
documented examples (GitHub's are built from the sandbox's records, complete enough for
githubkit's typed webhook models to accept them)."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any
from uuid import uuid4

import httpx
import pytest
from sqlalchemy import create_engine

from coding_agent.config import AgentConfig
from coding_agent.errors import QueueUnavailable
from coding_agent.sandbox.github.state import GitHubState
from coding_agent.store.deliveries import DeliveryLog
from coding_agent.web.app import build_app
from coding_agent.web.request_body import BodyReader
from coding_agent.web.webhooks import webhook_routes
from tests.support.github_webhooks import GitHubWebhooks

SECRET = "whsec-" + "0123456789abcdef"
GITLAB_TOKEN = "gl-hook-" + "0123456789abcdef"
REPO = "acme/widgets"


class RecordingSink:
    """The runtime side of the port, recording what it was asked (deliveries: the real log)."""

    def __init__(self, deliveries: DeliveryLog) -> None:
        self.deliveries = deliveries
        self.accepted: list[tuple[str, str]] = []
        self.queue_away = False  # as when RabbitMQ cannot be reached

    async def first_delivery(self, delivery_id: str) -> bool:
        return self.deliveries.first(delivery_id)

    async def accept(self, key: str, kind: str) -> None:
        if self.queue_away:
            raise QueueUnavailable("queue coding-agent.tasks: the broker cannot be reached (AMQPConnectionError)")
        self.accepted.append((kind, key))


def _config(**hooks: Any) -> AgentConfig:
    return AgentConfig.model_validate(
        {
            "task_source": ["github", "gitlab"],
            "github": {"owner": "acme", "token": "t", "bot_name": "agent-bot"},
            "gitlab": {"group": "acme", "token": "t", "bot_name": "agent-bot"},
            "llm": {"provider": "openai", "openai": {"model": "m", "api_key": "k"}},
            "webhooks": hooks or {"github_secret": SECRET, "gitlab_token": GITLAB_TOKEN},
        }
    )


@pytest.fixture
def sink(tmp_path: Path) -> RecordingSink:
    return RecordingSink(DeliveryLog(create_engine(f"sqlite:///{tmp_path / 'state.db'}")))


@pytest.fixture
def github() -> tuple[GitHubState, GitHubWebhooks, int]:
    state = GitHubState()
    state.add_user("alice")
    state.add_user("agent-bot", bot=True)
    state.add_repo(REPO)
    state.add_repo("elsewhere/tool")
    number = state.create_issue(REPO, "Add a greeting", "Please add hello.txt.", author="alice")
    state.add_label(REPO, number, "coding agent", actor="alice")
    return state, GitHubWebhooks(state), number


async def _post(
    config: AgentConfig, sink: RecordingSink, path: str, body: bytes | AsyncIterator[bytes], headers: dict[str, str]
) -> httpx.Response:
    """POST to a fresh app of `config` (`body` as an iterator: sent chunked, as it comes)."""
    return await _post_to(build_app(webhook_routes(config, sink)), path, body, headers)


async def _post_to(app: Any, path: str, body: bytes | AsyncIterator[bytes], headers: dict[str, str]) -> httpx.Response:
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://agent") as client:
        return await client.post(path, content=body, headers=headers)


async def _stalling(
    first: bytes, resume: asyncio.Event, rest: bytes = b"", reading: asyncio.Event | None = None
) -> AsyncIterator[bytes]:
    """A body that sends `first`, then nothing until `resume` is set (never, unless set);
    `reading` is set once the server asks for more than `first`."""
    yield first
    if reading is not None:
        reading.set()
    await resume.wait()
    yield rest


async def test_a_signed_labeled_issue_is_enqueued(sink: RecordingSink, github: Any) -> None:
    _, hooks, number = github
    body = hooks.body(hooks.issues(REPO, number, "labeled", "alice", label="coding agent"))
    response = await _post(_config(), sink, "/webhooks/github", body, hooks.headers("issues", body, SECRET))
    assert response.status_code == 202
    assert sink.accepted == [("new", f"github:{REPO}#{number}")]


async def test_an_event_that_cannot_be_queued_is_503_and_says_the_poll_picks_it_up(
    sink: RecordingSink, github: Any
) -> None:
    """The broker is away: not a 500 with a traceback, but a 503 that says what happens."""
    _, hooks, number = github
    sink.queue_away = True
    body = hooks.body(hooks.issues(REPO, number, "labeled", "alice", label="coding agent"))
    response = await _post(_config(), sink, "/webhooks/github", body, hooks.headers("issues", body, SECRET))
    assert response.status_code == 503
    assert "the next poll picks the task up" in response.text and sink.accepted == []


@pytest.mark.parametrize("signature", [None, "sha256=" + "0" * 64, "sha1=abc"])
async def test_a_missing_or_wrong_signature_is_401_and_nothing_else(
    sink: RecordingSink, github: Any, signature: str | None
) -> None:
    _, hooks, number = github
    body = hooks.body(hooks.issues(REPO, number, "labeled", "alice", label="coding agent"))
    headers = hooks.headers("issues", body, SECRET)
    if signature is None:
        del headers["X-Hub-Signature-256"]
    else:
        headers["X-Hub-Signature-256"] = signature
    response = await _post(_config(), sink, "/webhooks/github", body, headers)
    assert response.status_code == 401
    assert sink.accepted == []
    assert SECRET not in response.text


async def test_a_body_signed_with_another_secret_is_401(sink: RecordingSink, github: Any) -> None:
    _, hooks, number = github
    body = hooks.body(hooks.issues(REPO, number, "labeled", "alice", label="coding agent"))
    response = await _post(_config(), sink, "/webhooks/github", body, hooks.headers("issues", body, "not-the-secret"))
    assert response.status_code == 401 and sink.accepted == []


async def test_a_body_over_one_mib_is_413(sink: RecordingSink, github: Any) -> None:
    _, hooks, _ = github
    body = b"{" + b" " * (1024 * 1024) + b"}"
    response = await _post(_config(), sink, "/webhooks/github", body, hooks.headers("issues", body, SECRET))
    assert response.status_code == 413 and sink.accepted == []


async def test_a_delivery_seen_before_is_ignored(sink: RecordingSink, github: Any) -> None:
    _, hooks, number = github
    body = hooks.body(hooks.issues(REPO, number, "labeled", "alice", label="coding agent"))
    headers = hooks.headers("issues", body, SECRET, delivery="72d3162e-cc78-11e3-81ab-4c9367dc0958")
    first = await _post(_config(), sink, "/webhooks/github", body, headers)
    again = await _post(_config(), sink, "/webhooks/github", body, headers)
    assert (first.status_code, again.status_code) == (202, 200)
    assert sink.accepted == [("new", f"github:{REPO}#{number}")], "enqueued once"


async def test_a_comment_steers_a_running_task_and_may_be_a_follow_up(sink: RecordingSink, github: Any) -> None:
    state, hooks, number = github
    comment = state.add_comment(REPO, number, "alice", "@agent-bot please also add a README")
    body = hooks.body(hooks.issue_comment(REPO, number, comment, "alice"))
    response = await _post(_config(), sink, "/webhooks/github", body, hooks.headers("issue_comment", body, SECRET))
    assert response.status_code == 202
    assert sink.accepted == [("steer", f"github:{REPO}#{number}"), ("followup", f"github:{REPO}#{number}")]


async def test_an_unassign_steers_the_running_task(sink: RecordingSink, github: Any) -> None:
    state, hooks, number = github
    state.assign(REPO, number, "agent-bot", actor="alice")
    state.unassign(REPO, number, "agent-bot", actor="alice")
    body = hooks.body(hooks.issues(REPO, number, "unassigned", "alice"))
    response = await _post(_config(), sink, "/webhooks/github", body, hooks.headers("issues", body, SECRET))
    assert response.status_code == 202 and sink.accepted == [("steer", f"github:{REPO}#{number}")]


async def test_out_of_scope_unknown_and_malformed_events_enqueue_nothing(sink: RecordingSink, github: Any) -> None:
    state, hooks, _ = github
    other = state.create_issue("elsewhere/tool", "x", "y", author="alice")
    state.add_label("elsewhere/tool", other, "coding agent", actor="alice")
    outside = hooks.body(hooks.issues("elsewhere/tool", other, "labeled", "alice", label="coding agent"))
    ping = json.dumps({"zen": "Keep it logically awesome.", "hook_id": 1}).encode()
    broken = b'{"action": "labeled", "issue": 7}'
    answers = [
        await _post(_config(), sink, "/webhooks/github", outside, hooks.headers("issues", outside, SECRET)),
        await _post(_config(), sink, "/webhooks/github", ping, hooks.headers("ping", ping, SECRET)),
        await _post(_config(), sink, "/webhooks/github", broken, hooks.headers("issues", broken, SECRET)),
        await _post(_config(), sink, "/webhooks/github", b"not json", hooks.headers("issues", b"not json", SECRET)),
    ]
    assert [answer.status_code for answer in answers] == [200, 202, 200, 400]
    assert sink.accepted == []


async def test_an_endpoint_without_its_secret_is_off(sink: RecordingSink, github: Any) -> None:
    _, hooks, number = github
    body = hooks.body(hooks.issues(REPO, number, "labeled", "alice", label="coding agent"))
    config = _config(gitlab_token=GITLAB_TOKEN)
    response = await _post(config, sink, "/webhooks/github", body, hooks.headers("issues", body, SECRET))
    assert response.status_code == 404 and sink.accepted == []


# -- GitLab (payloads as in GitLab's webhook events documentation) --------------------------

_PROJECT = {"id": 15, "name": "widgets", "path_with_namespace": "acme/widgets", "web_url": "http://gitlab.example/acme/widgets"}


def _gitlab_issue_hook(labels: list[str], changes: dict[str, Any] | None = None) -> dict[str, Any]:
    return {
        "object_kind": "issue",
        "event_type": "issue",
        "user": {"id": 1, "name": "Alice", "username": "alice"},
        "project": _PROJECT,
        "object_attributes": {"id": 301, "iid": 23, "title": "Add a greeting", "action": "update", "state": "opened"},
        "labels": [{"id": n, "title": title, "color": "#ededed", "project_id": 15} for n, title in enumerate(labels)],
        "changes": changes or {},
    }


def _gitlab_note_hook() -> dict[str, Any]:
    return {
        "object_kind": "note",
        "event_type": "note",
        "user": {"id": 1, "name": "Alice", "username": "alice"},
        "project": _PROJECT,
        "object_attributes": {"id": 1244, "note": "@agent-bot add a README too", "noteable_type": "MergeRequest"},
        "merge_request": {"id": 7, "iid": 4, "title": "Add a greeting", "state": "opened"},
    }


def _gitlab_headers(event: str, token: str = GITLAB_TOKEN, uuid: str | None = None) -> dict[str, str]:
    """GitLab's headers, with a fresh `X-Gitlab-Event-UUID` unless `uuid` is given."""
    return {
        "X-Gitlab-Event": event,
        "X-Gitlab-Token": token,
        "X-Gitlab-Event-UUID": uuid or str(uuid4()),
        "Content-Type": "application/json",
    }


async def test_gitlab_issue_hook_with_the_label_is_enqueued(sink: RecordingSink) -> None:
    body = json.dumps(_gitlab_issue_hook(["coding agent"])).encode()
    response = await _post(_config(), sink, "/webhooks/gitlab", body, _gitlab_headers("Issue Hook"))
    assert response.status_code == 202 and sink.accepted == [("new", "gitlab:acme/widgets#23")]


async def test_gitlab_wrong_token_is_401(sink: RecordingSink) -> None:
    body = json.dumps(_gitlab_issue_hook(["coding agent"])).encode()
    wrong = await _post(_config(), sink, "/webhooks/gitlab", body, _gitlab_headers("Issue Hook", token="guess"))
    headers = _gitlab_headers("Issue Hook")
    del headers["X-Gitlab-Token"]
    missing = await _post(_config(), sink, "/webhooks/gitlab", body, headers)
    assert (wrong.status_code, missing.status_code) == (401, 401) and sink.accepted == []


async def test_gitlab_note_and_unassign_steer_and_duplicates_are_ignored(sink: RecordingSink) -> None:
    note = json.dumps(_gitlab_note_hook()).encode()
    unassign = json.dumps(
        _gitlab_issue_hook([], {"assignees": {"previous": [{"username": "agent-bot"}], "current": []}})
    ).encode()
    first = await _post(_config(), sink, "/webhooks/gitlab", note, _gitlab_headers("Note Hook", uuid="u-1"))
    again = await _post(_config(), sink, "/webhooks/gitlab", note, _gitlab_headers("Note Hook", uuid="u-1"))
    steer = await _post(_config(), sink, "/webhooks/gitlab", unassign, _gitlab_headers("Issue Hook", uuid="u-2"))
    assert [r.status_code for r in (first, again, steer)] == [202, 200, 202]
    assert sink.accepted == [
        ("steer", "gitlab:acme/widgets!4"),
        ("followup", "gitlab:acme/widgets!4"),
        ("steer", "gitlab:acme/widgets#23"),
    ]


async def test_gitlab_out_of_scope_and_not_json_enqueue_nothing(sink: RecordingSink) -> None:
    outside = _gitlab_issue_hook(["coding agent"])
    outside["project"] = {**_PROJECT, "id": 99, "path_with_namespace": "other/widgets"}
    answers = [
        await _post(_config(), sink, "/webhooks/gitlab", json.dumps(outside).encode(), _gitlab_headers("Issue Hook")),
        await _post(_config(), sink, "/webhooks/gitlab", b"\xff\xfe", _gitlab_headers("Issue Hook")),
        await _post(_config(), sink, "/webhooks/gitlab", b"[]", _gitlab_headers("Issue Hook")),
    ]
    assert [answer.status_code for answer in answers] == [200, 400, 200]
    assert sink.accepted == []


# -- Hostile deliveries (SPEC 15) ---------------------------------------------------------

SLOW_SECONDS = 60.0  # what a body read would wait for: a refusal is answered without it


async def test_a_delivery_without_an_id_is_refused_before_its_body_is_read(sink: RecordingSink, github: Any) -> None:
    _, hooks, number = github
    body = hooks.body(hooks.issues(REPO, number, "labeled", "alice", label="coding agent"))
    headers = hooks.headers("issues", body, SECRET)
    del headers["X-GitHub-Delivery"]
    gitlab_headers = _gitlab_headers("Issue Hook")
    del gitlab_headers["X-Gitlab-Event-UUID"]
    config = _config(github_secret=SECRET, gitlab_token=GITLAB_TOKEN, body_timeout_seconds=SLOW_SECONDS)
    never = asyncio.Event()
    answers = await asyncio.wait_for(
        asyncio.gather(
            _post(config, sink, "/webhooks/github", _stalling(body[:10], never), headers),
            _post(config, sink, "/webhooks/gitlab", _stalling(b"{", never), gitlab_headers),
        ),
        SLOW_SECONDS / 2,
    )
    assert [answer.status_code for answer in answers] == [400, 400]
    assert "X-GitHub-Delivery" in answers[0].text and "X-Gitlab-Event-UUID" in answers[1].text
    assert all(answer.headers["connection"] == "close" for answer in answers), "the unread body closes the connection"
    assert sink.accepted == []


async def test_an_unsigned_delivery_is_401_before_its_body_is_read(sink: RecordingSink, github: Any) -> None:
    _, hooks, number = github
    body = hooks.body(hooks.issues(REPO, number, "labeled", "alice", label="coding agent"))
    headers = hooks.headers("issues", body, SECRET)
    del headers["X-Hub-Signature-256"]
    config = _config(github_secret=SECRET, body_timeout_seconds=SLOW_SECONDS)
    answer = await asyncio.wait_for(
        _post(config, sink, "/webhooks/github", _stalling(body[:10], asyncio.Event()), headers), SLOW_SECONDS / 2
    )
    assert (answer.status_code, answer.headers["connection"]) == (401, "close") and sink.accepted == []


async def test_a_stalled_body_is_cut_off_at_the_deadline(sink: RecordingSink, github: Any) -> None:
    _, hooks, number = github
    body = hooks.body(hooks.issues(REPO, number, "labeled", "alice", label="coding agent"))
    config = _config(github_secret=SECRET, body_timeout_seconds=0.5)
    stalled = _stalling(body[:10], asyncio.Event())
    answer = await _post(config, sink, "/webhooks/github", stalled, hooks.headers("issues", body, SECRET))
    assert (answer.status_code, answer.headers["connection"]) == (408, "close")
    assert "not received within 0.5 s" in answer.text and sink.accepted == []


async def test_a_chunked_body_over_one_mib_is_413(sink: RecordingSink, github: Any) -> None:
    """No Content-Length to refuse by: the cap is on what arrives."""
    _, hooks, _ = github

    async def chunks() -> AsyncIterator[bytes]:
        for _ in range(20):
            yield b" " * 65536

    answer = await _post(_config(), sink, "/webhooks/github", chunks(), hooks.headers("issues", b"", SECRET))
    assert answer.status_code == 413 and sink.accepted == []


async def test_stalled_bodies_never_make_a_signed_delivery_wait_or_fail(sink: RecordingSink, github: Any) -> None:
    """The old `webhooks.max_concurrent: 1` (still accepted, ignored): a stalled body, GitHub
    or GitLab, holds no slot a signed delivery needs; both are answered, the stalled one
    once it comes whole."""
    _, hooks, number = github
    body = hooks.body(hooks.issues(REPO, number, "labeled", "alice", label="coding agent"))
    config = _config(github_secret=SECRET, gitlab_token=GITLAB_TOKEN, max_concurrent=1)
    app = build_app(webhook_routes(config, sink))
    resume, reading = asyncio.Event(), asyncio.Event()
    stalled = _stalling(body[:10], resume, body[10:], reading)
    slow = asyncio.create_task(_post_to(app, "/webhooks/github", stalled, hooks.headers("issues", body, SECRET)))
    gitlab_reading = asyncio.Event()
    gitlab_stalled = _stalling(b"{", resume, b"}", gitlab_reading)
    slow_gitlab = asyncio.create_task(_post_to(app, "/webhooks/gitlab", gitlab_stalled, _gitlab_headers("Issue Hook")))
    try:
        await asyncio.wait_for(asyncio.gather(reading.wait(), gitlab_reading.wait()), 30)
        answered = await _post_to(app, "/webhooks/github", body, hooks.headers("issues", body, SECRET))
    finally:
        resume.set()
    assert answered.status_code == 202
    assert (await slow).status_code == 202, "the stalled one, once whole, is read too: not a 503"
    assert (await slow_gitlab).status_code == 200
    assert sink.accepted == [("new", f"github:{REPO}#{number}")] * 2


async def test_a_body_without_progress_for_the_idle_deadline_is_408_before_the_total(
    sink: RecordingSink, github: Any
) -> None:
    _, hooks, number = github
    body = hooks.body(hooks.issues(REPO, number, "labeled", "alice", label="coding agent"))
    reader = BodyReader(timeout_seconds=60, idle_seconds=0.3)
    app = build_app(webhook_routes(_config(github_secret=SECRET), sink, reader))
    answer = await asyncio.wait_for(
        _post_to(app, "/webhooks/github", _stalling(body[:10], asyncio.Event()), hooks.headers("issues", body, SECRET)), 30
    )
    assert (answer.status_code, answer.headers["connection"]) == (408, "close")
    assert "no progress for 0.3 s" in answer.text and sink.accepted == []
    assert reader.bytes_in_flight == 0


async def test_a_full_budget_drops_the_stalest_body_not_the_delivery_that_arrives(
    sink: RecordingSink, github: Any
) -> None:
    """The bytes in flight are what is bounded: a delivery that needs room takes it from
    the body that made progress least recently, whose buffer is freed at once."""
    _, hooks, number = github
    body = hooks.body(hooks.issues(REPO, number, "labeled", "alice", label="coding agent"))
    reader = BodyReader(timeout_seconds=60, budget_bytes=len(body) + 100)
    app = build_app(webhook_routes(_config(github_secret=SECRET), sink, reader))
    resume, reading = asyncio.Event(), asyncio.Event()
    junk = b"{" + b" " * 200
    stalled = _stalling(junk, resume, b"}", reading)
    slow = asyncio.create_task(_post_to(app, "/webhooks/github", stalled, hooks.headers("issues", junk + b"}", SECRET)))
    try:
        await asyncio.wait_for(reading.wait(), 30)
        held_while_stalled = reader.bytes_in_flight
        answered = await _post_to(app, "/webhooks/github", body, hooks.headers("issues", body, SECRET))
        held_after = reader.bytes_in_flight
    finally:
        resume.set()
    dropped = await slow
    assert held_while_stalled == len(junk)
    assert answered.status_code == 202 and sink.accepted == [("new", f"github:{REPO}#{number}")]
    assert held_after == 0, "the stalled body's bytes were freed when it was dropped"
    assert (dropped.status_code, dropped.headers["connection"]) == (408, "close")
    assert "least progress" in dropped.text
    assert reader.bytes_in_flight == 0


@pytest.mark.parametrize(
    "body",
    [
        b'{"issue": ' + b"[" * 100_000 + b"]" * 100_000 + b"}",
        b"[" * 200_000,
        b'{"a": ' + b'{"b": ' * 65 + b"1" + b"}" * 65 + b"}",
    ],
    ids=["deep", "unclosed", "just-too-deep"],
)
async def test_a_signed_body_nesting_too_deep_is_400_not_500(sink: RecordingSink, body: bytes) -> None:
    github_answer = await _post(_config(), sink, "/webhooks/github", body, GitHubWebhooks.headers("issues", body, SECRET))
    gitlab_answer = await _post(_config(), sink, "/webhooks/gitlab", body, _gitlab_headers("Issue Hook"))
    assert [github_answer.status_code, gitlab_answer.status_code] == [400, 400]
    assert "nests deeper than 64 levels" in github_answer.text and "nests deeper than 64 levels" in gitlab_answer.text
    assert sink.accepted == []


def _signed(body: bytes, key: bytes, *, stamp: int | None = None, delivery: str = "msg_1") -> dict[str, str]:
    """GitLab's Standard Webhooks signature headers for `body`, signed with `key`."""
    import base64
    import hashlib
    import hmac
    import time

    sent = str(int(time.time()) if stamp is None else stamp)
    digest = hmac.new(key, f"{delivery}.{sent}.".encode() + body, hashlib.sha256).digest()
    return {"webhook-id": delivery, "webhook-timestamp": sent, "webhook-signature": "v1," + base64.b64encode(digest).decode()}


async def test_gitlab_signed_deliveries_are_checked_when_a_signing_token_is_set(sink: RecordingSink) -> None:
    """SPEC 17: with `webhooks.gitlab_signing_token`, a GitLab delivery needs a good
    `webhook-signature` (HMAC over id.timestamp.body) besides X-Gitlab-Token; a
    forged, re-signed-with-another-key, tampered or replayed one is 401 and enqueues nothing."""
    import base64
    import secrets
    import time

    raw = secrets.token_bytes(24)
    config = _config(gitlab_token=GITLAB_TOKEN, gitlab_signing_token="whsec_" + base64.b64encode(raw).decode())
    body = json.dumps(_gitlab_issue_hook(["coding agent"])).encode()
    cases = {
        "unsigned": {},
        "another key": _signed(body, secrets.token_bytes(24)),
        "tampered body": _signed(body + b" ", raw),
        "replayed": _signed(body, raw, stamp=int(time.time()) - 3600),
    }
    for what, signature in cases.items():
        response = await _post(config, sink, "/webhooks/gitlab", body, {**_gitlab_headers("Issue Hook"), **signature})
        assert response.status_code == 401, what
    assert sink.accepted == []
    good = await _post(config, sink, "/webhooks/gitlab", body, {**_gitlab_headers("Issue Hook"), **_signed(body, raw)})
    assert good.status_code == 202 and sink.accepted == [("new", "gitlab:acme/widgets#23")]

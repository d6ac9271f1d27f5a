"""Slack's Events API end to end (SPEC 18): real HTTP from the test (as Slack) to `serve`'s
`/slack/events`, and from the agent to the Slack sandbox's Web API and the sandbox forge.

A mention in a mapped channel by a mapped maintainer is seen (👀) and answered in its
thread; a user that maps to nobody, or to a login without write access, gets one reply and
no model request; an event delivered twice is taken in once; a bad signature or a stale
timestamp is refused before anything is done.
"""

from __future__ import annotations

import asyncio
import secrets
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from coding_agent.runtime.service import AgentService
from coding_agent.sandbox.replay_model import ReplaySandbox
from coding_agent.sandbox.slack import SlackSandbox, encode, signed_headers
from coding_agent.web.server import bind_socket, serving_http
from tests.support.slack import SlackEvents
from tests.support.waiting import wait_until

from ._steering import steering_config
from .conftest import MAINTAINER, READER, REPO, GitHubForge, load_for_service

CHANNEL = "C0DEVELOP"
ALICE = "U0ALICE"  # maps to the maintainer
RITA = "U0RITA"  # maps to a reader
MALLORY = "U0MALLORY"  # maps to nobody


@pytest.fixture
def slack() -> Iterator[SlackEvents]:
    bot_token = "xoxb-" + secrets.token_hex(16)
    with SlackSandbox(bot_token, app_token="xapp-" + secrets.token_hex(16)) as sandbox:
        sandbox.state.add_channel(CHANNEL, "develop")
        for user, name in ((ALICE, "alice"), (RITA, "rita"), (MALLORY, "mallory")):
            sandbox.state.add_user(user, name)
        yield SlackEvents(sandbox, secrets.token_hex(16))


def _serve(
    github_forge: GitHubForge,
    slack: SlackEvents,
    tmp_path: Path,
    model: ReplaySandbox,
    act: Callable[[str], Any],
    socket_mode: bool = False,
) -> None:
    """`serve`'s web app with `chat.slack` on the Events API (or Socket Mode); `act(url)`
    runs in a thread while it serves."""
    way_in = {"app_token": slack.slack.state.app_token} if socket_mode else {"signing_secret": slack.secret}
    settings = {
        "bot_token": slack.slack.state.bot_token,
        **way_in,
        "api_url": slack.slack.api_url,
        "channels": {CHANNEL: f"github:{REPO}"},
        "users": {ALICE: MAINTAINER, RITA: READER},
    }
    # Over Socket Mode nothing listens: the dashboard gives `act` a URL all the same.
    setup = steering_config(
        tmp_path, [github_forge], model, chat={"slack": settings}, scheduling={"interval_seconds": 3600},
        dashboard={"enabled": True, "bind": "127.0.0.1:0"},
    )

    async def main() -> None:
        service = AgentService(load_for_service(setup))
        try:
            async with serving_http(service.config, service, bind_socket("127.0.0.1", 0)) as url:
                assert url is not None
                await asyncio.to_thread(act, url)
        finally:
            await service.aclose()

    asyncio.run(asyncio.wait_for(main(), 120))


def _bot_replies(slack: SlackEvents, thread_ts: str) -> list[str]:
    state = slack.slack.state
    return [m.text for m in state.thread(CHANNEL, thread_ts) if m.user == state.bot_user]


def _eyes(slack: SlackEvents, ts: str) -> list[str]:
    message = next(m for m in slack.slack.state.messages if m.ts == ts)
    return message.reactions.get("eyes", [])


def _wait(condition: Callable[[], bool], what: str) -> None:
    asyncio.run(wait_until(condition, 30, what))


def test_a_mapped_maintainers_mention_is_seen_and_answered_in_its_thread(
    github_forge: GitHubForge, slack: SlackEvents, tmp_path: Path
) -> None:
    envelope = slack.mention(CHANNEL, ALICE, "please add hello.txt")
    ts = envelope["event"]["ts"]

    def act(url: str) -> None:
        response = slack.deliver(url, envelope)
        assert response.status_code == 200, response.text
        _wait(lambda: bool(_bot_replies(slack, ts)), "the bot's reply in the thread")

    with ReplaySandbox({"replies": []}) as model:
        _serve(github_forge, slack, tmp_path, model, act)
        assert model.requests == []

    assert _eyes(slack, ts) == [slack.slack.state.bot_user]
    replies = _bot_replies(slack, ts)
    assert len(replies) == 1 and f"slack:{CHANNEL}/{ts}" in replies[0] and REPO in replies[0]
    assert slack.slack.state.calls_to("chat.postMessage")[0].args["thread_ts"] == ts


@pytest.mark.parametrize(("user", "expected"), [(MALLORY, "chat.slack.users"), (RITA, "write access")])
def test_a_user_without_a_mapping_or_write_access_gets_one_reply_and_nothing_runs(
    github_forge: GitHubForge, slack: SlackEvents, tmp_path: Path, user: str, expected: str
) -> None:
    envelope = slack.mention(CHANNEL, user, "delete everything")
    ts = envelope["event"]["ts"]

    def act(url: str) -> None:
        assert slack.deliver(url, envelope).status_code == 200
        _wait(lambda: bool(_bot_replies(slack, ts)), "the refusal in the thread")
        again = slack.mention(CHANNEL, user, "please?", thread_ts=ts)
        assert slack.deliver(url, again).status_code == 200
        _wait(lambda: len(_bot_replies(slack, ts)) >= 2, "the second refusal")

    with ReplaySandbox({"replies": []}) as model:
        _serve(github_forge, slack, tmp_path, model, act)
        assert model.requests == [], "no model request for a refused user"

    replies = _bot_replies(slack, ts)
    assert all(expected in reply for reply in replies), replies
    assert _eyes(slack, ts) == []
    assert slack.slack.state.bot_token not in "".join(replies) and slack.secret not in "".join(replies)


def test_the_same_event_delivered_twice_is_taken_in_once(
    github_forge: GitHubForge, slack: SlackEvents, tmp_path: Path
) -> None:
    envelope = slack.mention(CHANNEL, ALICE, "please add hello.txt")
    ts = envelope["event"]["ts"]
    other = slack.mention(CHANNEL, ALICE, "and a second request")

    def act(url: str) -> None:
        assert slack.deliver(url, envelope).status_code == 200
        assert slack.deliver(url, envelope).status_code == 200  # Slack's retry: acknowledged, ignored
        assert slack.deliver(url, other).status_code == 200  # delivered after both: when it is answered, they were
        _wait(lambda: bool(_bot_replies(slack, other["event"]["ts"])), "the second request's reply")

    with ReplaySandbox({"replies": []}) as model:
        _serve(github_forge, slack, tmp_path, model, act)

    assert len(_bot_replies(slack, ts)) == 1
    assert len(slack.slack.state.calls_to("reactions.add")) == 2


def test_a_bad_signature_or_a_stale_timestamp_is_refused(
    github_forge: GitHubForge, slack: SlackEvents, tmp_path: Path
) -> None:
    envelope = slack.mention(CHANNEL, ALICE, "please add hello.txt")

    def act(url: str) -> None:
        assert slack.deliver(url, envelope, secret=secrets.token_hex(16)).status_code == 401
        assert slack.deliver(url, envelope, age=600).status_code == 401  # a replay of an old request
        unsigned = httpx.post(f"{url}/slack/events", content=encode(envelope), headers={"Content-Type": "application/json"})
        assert unsigned.status_code == 401
        huge = b"{" + b" " * (2 << 20) + b"}"
        assert httpx.post(f"{url}/slack/events", content=huge, headers=signed_headers(huge, slack.secret)).status_code == 413

    with ReplaySandbox({"replies": []}) as model:
        _serve(github_forge, slack, tmp_path, model, act)

    assert slack.slack.state.calls == [], "nothing reached Slack's API: no reaction, no reply"


def test_the_event_is_acknowledged_before_the_work_and_slacks_rate_limit_is_honoured(
    github_forge: GitHubForge, slack: SlackEvents, tmp_path: Path
) -> None:
    """Slack wants its answer within 3 s whatever the agent then does: here the 👀 waits on
    Slack (held), and the POST is answered all the same; the reply then meets a 429 with
    `Retry-After` and is posted after it."""
    envelope = slack.mention(CHANNEL, ALICE, "please add hello.txt")
    ts = envelope["event"]["ts"]
    state = slack.slack.state
    gate = state.hold("reactions.add")
    state.fail("chat.postMessage", 429, retry_after=1)

    def act(url: str) -> None:
        assert slack.deliver(url, envelope).status_code == 200
        assert _bot_replies(slack, ts) == [] and _eyes(slack, ts) == [], "answered before the work was done"
        gate.set()
        _wait(lambda: bool(_bot_replies(slack, ts)), "the reply, after the rate limit")

    with ReplaySandbox({"replies": []}) as model:
        _serve(github_forge, slack, tmp_path, model, act)

    assert _eyes(slack, ts) == [state.bot_user]
    assert len(_bot_replies(slack, ts)) == 1
    assert len(state.calls_to("chat.postMessage")) == 2, "the 429, then the retry after Retry-After"


def test_a_mention_in_an_unmapped_channel_is_ignored(github_forge: GitHubForge, slack: SlackEvents, tmp_path: Path) -> None:
    slack.slack.state.add_channel("C0RANDOM", "random")
    envelope = slack.mention("C0RANDOM", ALICE, "please add hello.txt")
    marker = slack.mention(CHANNEL, ALICE, "and here")

    def act(url: str) -> None:
        assert slack.deliver(url, envelope).status_code == 200
        assert slack.deliver(url, marker).status_code == 200
        _wait(lambda: bool(_bot_replies(slack, marker["event"]["ts"])), "the mapped channel's reply")

    with ReplaySandbox({"replies": []}) as model:
        _serve(github_forge, slack, tmp_path, model, act)

    assert [m for m in slack.slack.state.bot_messages("C0RANDOM")] == []


def test_over_socket_mode_a_mention_is_acknowledged_seen_and_answered_once(
    github_forge: GitHubForge, slack: SlackEvents, tmp_path: Path
) -> None:
    """Socket Mode: the agent opens the connection (`apps.connections.open` with the app
    token), acknowledges each envelope, and takes an event Slack sends twice in once."""
    sandbox = slack.slack
    envelope = slack.mention(CHANNEL, ALICE, "please add hello.txt")
    ts = envelope["event"]["ts"]
    refused = slack.mention(CHANNEL, MALLORY, "me too")

    def act(url: str) -> None:
        _wait(lambda: sandbox.hub.connected >= 1, "the agent's Socket Mode connection")
        first = sandbox.push(envelope)
        again = sandbox.push(envelope)  # Slack's retry of the same event
        last = sandbox.push(refused)
        _wait(lambda: bool(_bot_replies(slack, refused["event"]["ts"])) and bool(_bot_replies(slack, ts)), "both replies")
        _wait(lambda: {first, again, last} <= set(sandbox.state.acks), "the three acknowledgements")

    with ReplaySandbox({"replies": []}) as model:
        _serve(github_forge, slack, tmp_path, model, act, socket_mode=True)
        assert model.requests == []

    assert _eyes(slack, ts) == [sandbox.state.bot_user]
    assert len(_bot_replies(slack, ts)) == 1
    assert "chat.slack.users" in _bot_replies(slack, refused["event"]["ts"])[0]
    assert sandbox.state.calls_to("apps.connections.open")[0].token == sandbox.state.app_token


def test_slack_answering_503_for_a_while_delays_the_reply_but_does_not_lose_it(
    github_forge: GitHubForge, slack: SlackEvents, tmp_path: Path
) -> None:
    envelope = slack.mention(CHANNEL, ALICE, "please add hello.txt")
    ts = envelope["event"]["ts"]
    state = slack.slack.state
    state.fail("chat.postMessage", 503, times=2)

    def act(url: str) -> None:
        assert slack.deliver(url, envelope).status_code == 200
        _wait(lambda: bool(_bot_replies(slack, ts)), "the reply once Slack answers again")

    with ReplaySandbox({"replies": []}) as model:
        _serve(github_forge, slack, tmp_path, model, act)

    assert len(_bot_replies(slack, ts)) == 1
    assert len(state.calls_to("chat.postMessage")) == 3


def test_slack_down_when_serve_starts_delays_socket_mode_without_failing_the_start(
    github_forge: GitHubForge, slack: SlackEvents, tmp_path: Path
) -> None:
    sandbox = slack.slack
    sandbox.state.fail("apps.connections.open", 503, times=2)
    envelope = slack.mention(CHANNEL, ALICE, "please add hello.txt")
    ts = envelope["event"]["ts"]

    def act(url: str) -> None:
        _wait(lambda: sandbox.hub.connected >= 1, "the connection once Slack answers")
        sandbox.push(envelope)
        _wait(lambda: bool(_bot_replies(slack, ts)), "the reply")

    with ReplaySandbox({"replies": []}) as model:
        _serve(github_forge, slack, tmp_path, model, act, socket_mode=True)

    assert len(sandbox.state.calls_to("apps.connections.open")) == 3

"""Deliver Slack events to `/slack/events` as Slack does: signed, with an event id."""

from __future__ import annotations

import time
from typing import Any

import httpx

from coding_agent.sandbox.slack import SlackSandbox, encode, mention_event, signed_headers

__all__ = ["SlackEvents"]


class SlackEvents:
    """The test's side of the Slack sandbox: people write, Slack delivers the event."""

    def __init__(self, slack: SlackSandbox, signing_secret: str) -> None:
        self.slack = slack
        self.secret = signing_secret

    def mention(self, channel: str, user: str, text: str, thread_ts: str | None = None) -> dict[str, Any]:
        """`user` writes `text` mentioning the bot; the `app_mention` envelope Slack would send."""
        state = self.slack.state
        message = state.post(channel, user, f"<@{state.bot_user}> {text}", thread_ts)
        return mention_event(state, message)

    def deliver(self, url: str, envelope: dict[str, Any], *, secret: str | None = None, age: float = 0) -> httpx.Response:
        """POST `envelope` to the agent's `/slack/events`, signed with `secret` (default: the right one)
        at a timestamp `age` seconds old."""
        body = encode(envelope)
        headers = signed_headers(body, secret or self.secret, int(time.time() - age))
        return httpx.post(f"{url}/slack/events", content=body, headers=headers, timeout=10)

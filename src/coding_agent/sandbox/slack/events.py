"""Events as Slack sends them to an app: the `event_callback` envelope and its signature.

The Events API signs each request with the app's signing secret: `X-Slack-Signature` is
`v0=` + HMAC-SHA256 of `v0:{X-Slack-Request-Timestamp}:{raw body}`. The sandbox (and the
playground) deliver a mention the way Slack would."""

from __future__ import annotations

import hashlib
import hmac
import json
import time
import uuid
from typing import Any

from coding_agent.sandbox.slack.state import SlackMessage, SlackState

__all__ = ["mention_event", "signed_headers"]


def mention_event(state: SlackState, message: SlackMessage, event_id: str | None = None) -> dict[str, Any]:
    """The `app_mention` envelope of `message` (which mentions the bot)."""
    event: dict[str, Any] = {
        "type": "app_mention", "user": message.user, "text": message.text, "ts": message.ts,
        "channel": message.channel, "event_ts": message.ts,
    }
    if message.thread_ts is not None and message.thread_ts != message.ts:
        event["thread_ts"] = message.thread_ts
    return {
        "token": "deprecated-verification-token", "team_id": state.team, "api_app_id": "A0SANDBOX",
        "event": event, "type": "event_callback", "event_id": event_id or f"Ev{uuid.uuid4().hex[:12].upper()}",
        "event_time": int(float(message.ts)),
        "authorizations": [{"team_id": state.team, "user_id": state.bot_user, "is_bot": True}],
    }


def signed_headers(body: bytes, signing_secret: str, timestamp: int | None = None) -> dict[str, str]:
    """The headers Slack sends with `body`, signed with `signing_secret` at `timestamp` (default: now)."""
    stamp = str(int(time.time()) if timestamp is None else timestamp)
    digest = hmac.new(signing_secret.encode(), b"v0:" + stamp.encode() + b":" + body, hashlib.sha256).hexdigest()
    return {"Content-Type": "application/json", "X-Slack-Request-Timestamp": stamp, "X-Slack-Signature": f"v0={digest}"}


def encode(envelope: dict[str, Any]) -> bytes:
    return json.dumps(envelope).encode()

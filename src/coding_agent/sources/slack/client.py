"""The agent's side of a Slack workspace, on slack_sdk's `AsyncWebClient` (SPEC 18).

`api_url` is the client's `base_url`, so GovSlack and the sandbox are reached the same way.
Slack's rate limits (`429` + `Retry-After`) are honoured, and a dropped connection or a
`500`/`503` is tried again after a backoff, by slack_sdk's own retry handlers.
A failed Slack call is logged and never raised into the caller: Slack being down must not
fail the work that asked it to speak (SPEC 18)."""

from __future__ import annotations

import logging
import re

from slack_sdk.errors import SlackApiError, SlackClientError
from slack_sdk.http_retry.builtin_async_handlers import (
    AsyncConnectionErrorRetryHandler,
    AsyncRateLimitErrorRetryHandler,
    AsyncServerErrorRetryHandler,
)
from slack_sdk.web.async_client import AsyncWebClient

from coding_agent.config.chat import SlackConfig
from coding_agent.redaction import Redactor

__all__ = ["SlackChat", "thread_key"]

log = logging.getLogger(__name__)

# Slack's ids and timestamps, strictly: a key made of anything else is refused before any use.
_CHANNEL = re.compile(r"[CGD][A-Z0-9]{2,30}")
_TS = re.compile(r"[0-9]{1,12}\.[0-9]{1,9}")


def thread_key(channel: str, thread_ts: str) -> str:
    """`slack:CHANNEL/THREAD_TS`, the key of the task a thread is; ValueError when either part
    is not made of Slack's own characters (a channel id, a `seconds.micros` timestamp)."""
    if _CHANNEL.fullmatch(channel) is None:
        raise ValueError(f"not a Slack channel id: {channel[:40]!r}")
    if _TS.fullmatch(thread_ts) is None:
        raise ValueError(f"not a Slack message timestamp: {thread_ts[:40]!r}")
    return f"slack:{channel}/{thread_ts}"


class SlackChat:
    """The bot's Web API calls: replies in a thread, reactions, and who a user is."""

    def __init__(self, settings: SlackConfig, redactor: Redactor) -> None:
        self.client = AsyncWebClient(
            token=settings.bot_token.get_secret_value(),
            base_url=settings.api_url,
            retry_handlers=[
                AsyncConnectionErrorRetryHandler(max_retry_count=2),
                AsyncRateLimitErrorRetryHandler(max_retry_count=3),
                AsyncServerErrorRetryHandler(max_retry_count=3),
            ],
        )
        self._redactor = redactor

    async def reply(self, channel: str, thread_ts: str, text: str) -> str | None:
        """Post `text` (redacted) in the thread; its ts, or None when Slack refused or is down."""
        try:
            answer = await self.client.chat_postMessage(channel=channel, thread_ts=thread_ts, text=self._redactor.text(text))
        except (SlackApiError, SlackClientError, OSError) as error:
            log.warning("slack %s: reply in %s not posted: %s", channel, thread_ts, self._redactor.text(str(error)))
            return None
        ts = answer.get("ts")
        return ts if isinstance(ts, str) else None

    async def react(self, channel: str, ts: str, name: str) -> bool:
        """Add the `name` reaction to a message; True when it is there (already was counts)."""
        try:
            await self.client.reactions_add(channel=channel, timestamp=ts, name=name)
        except SlackApiError as error:
            if error.response.get("error") == "already_reacted":
                return True
            log.warning("slack %s: reaction %s on %s refused: %s", channel, name, ts, error.response.get("error"))
            return False
        except (SlackClientError, OSError) as error:
            log.warning("slack %s: reaction %s on %s not added: %s", channel, name, ts, self._redactor.text(str(error)))
            return False
        return True

    async def aclose(self) -> None:
        session = getattr(self.client, "session", None)
        if session is not None and not session.closed:
            await session.close()

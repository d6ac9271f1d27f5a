"""How Slack's events reach the agent (SPEC 18), on Slack's Bolt: Socket Mode (a connection
the agent opens with the app token, no public URL) or `POST /slack/events` (the Events API).

Both hand the events to one Bolt app, which acknowledges each before its listener runs.

Bolt's async app checks each request's signature (`X-Slack-Signature`, HMAC-SHA256 of
`v0:{timestamp}:{body}` with the signing secret) and refuses a timestamp older than five
minutes (a replay), answers Slack's `url_verification`, ignores the bot's own events, and
acknowledges an event before its listener runs, so Slack has its answer within its 3
seconds whatever the intake then does. As for the forges' webhooks, a request without
the signature headers is refused before its body is read, and the body is read by the
shared `BodyReader` (the 1 MiB cap, the deadlines, the bytes-in-flight budget) before
Bolt sees it.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator
from typing import Any

import aiohttp
from slack_bolt.adapter.socket_mode.async_handler import AsyncSocketModeHandler
from slack_bolt.adapter.starlette.async_handler import to_async_bolt_request, to_starlette_response
from slack_bolt.async_app import AsyncApp
from slack_sdk.errors import SlackApiError, SlackClientError
from slack_sdk.web.async_client import AsyncWebClient
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from coding_agent.config.chat import SlackConfig
from coding_agent.runtime.slack_intake import SlackIntake
from coding_agent.web.request_body import BodyReader, Refusal

__all__ = ["slack_routes", "slack_socket_mode"]

log = logging.getLogger(__name__)


def _refuse(status: int, message: str) -> Response:
    """An answer before the whole body was read: the connection closes after it."""
    return JSONResponse({"message": message}, status_code=status, headers={"Connection": "close"})


def _bolt_app(settings: SlackConfig, intake: SlackIntake) -> AsyncApp:
    """The Bolt app whose listeners hand mentions to `intake` (request signatures checked
    when a signing secret is set: the Events API)."""
    secret = settings.signing_secret.get_secret_value() if settings.signing_secret is not None else None
    app = AsyncApp(
        client=intake.chat.client,
        signing_secret=secret or None,
        request_verification_enabled=bool(secret),
        logger=logging.getLogger("coding_agent.web.slack_bolt"),
    )

    @app.event("app_mention")
    async def on_mention(body: dict[str, Any], event: dict[str, Any]) -> None:
        event_id = body.get("event_id")
        await intake.mention(event_id if isinstance(event_id, str) else "", event)

    @app.event("message")
    async def on_message(body: dict[str, Any]) -> None:
        """Thread replies (steering, SPEC 18) are not read yet; acknowledged so Slack does not retry."""

    return app


@contextlib.asynccontextmanager
async def slack_socket_mode(settings: SlackConfig, intake: SlackIntake) -> AsyncIterator[None]:
    """Slack's events over Socket Mode while the block runs (`settings.app_token` must be set).

    The connection's URL comes from `apps.connections.open` at `chat.slack.api_url`; Bolt's
    aiohttp handler acknowledges each envelope before its listener runs and reconnects
    when Slack drops the connection."""
    assert settings.app_token is not None
    opener = AsyncWebClient(base_url=settings.api_url)
    handler = AsyncSocketModeHandler(_bolt_app(settings, intake), settings.app_token.get_secret_value(), web_client=opener)
    connecting = asyncio.create_task(_connect(handler))
    try:
        yield
    finally:
        connecting.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await connecting
        await handler.close_async()


async def _connect(handler: AsyncSocketModeHandler) -> None:
    """Open the connection, trying again with a growing pause while Slack cannot be
    reached: Slack being down delays the events, never the service's start (SPEC 18)."""
    pause = 1.0
    while True:
        try:
            await handler.connect_async()
        except (SlackApiError, SlackClientError, aiohttp.ClientError, OSError) as error:
            reason = error.response.get("error") if isinstance(error, SlackApiError) else type(error).__name__
            log.warning("slack: Socket Mode connection not opened (%s); trying again in %.0f s", reason, pause)
            await asyncio.sleep(pause)
            pause = min(pause * 2, 60.0)
            continue
        log.info("slack: listening over Socket Mode")
        return


def slack_routes(settings: SlackConfig, intake: SlackIntake, reader: BodyReader) -> list[Route]:
    """The `/slack/events` route; `settings.signing_secret` must be set."""
    assert settings.signing_secret is not None
    app = _bolt_app(settings, intake)

    async def events(request: Request) -> Response:
        if not request.headers.get("x-slack-signature", "").startswith("v0=") or not request.headers.get(
            "x-slack-request-timestamp", ""
        ).isdigit():
            return _refuse(401, "missing X-Slack-Signature or X-Slack-Request-Timestamp")
        try:
            body = await reader.read(request)
        except Refusal as refusal:
            return _refuse(refusal.status, refusal.message)
        try:
            bolt_request = to_async_bolt_request(request, body)
        except UnicodeDecodeError:
            return JSONResponse({"message": "the body is not UTF-8"}, status_code=400)
        return to_starlette_response(await app.async_dispatch(bolt_request))

    return [Route("/slack/events", events, methods=["POST"])]

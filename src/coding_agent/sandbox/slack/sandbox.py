"""The Slack testing server, served on a loopback port: `SlackSandbox().start()`, then `url` + `/api/`."""

from __future__ import annotations

import uuid
from types import TracebackType
from typing import Any, Self

from coding_agent.sandbox.http_server import BackgroundServer
from coding_agent.sandbox.slack.app import SocketHub, create_slack_app
from coding_agent.sandbox.slack.state import SlackState

__all__ = ["SlackSandbox"]


class SlackSandbox:
    def __init__(self, bot_token: str, app_token: str | None = None) -> None:
        self.state = SlackState(bot_token, app_token)
        self.hub = SocketHub()
        self._server = BackgroundServer(create_slack_app(self.state, self.hub))

    def push(self, envelope: dict[str, Any]) -> str:
        """Send an Events API envelope over every open Socket Mode connection; its envelope id."""
        envelope_id = str(uuid.uuid4())
        self.hub.push({"envelope_id": envelope_id, "type": "events_api", "payload": envelope,
                       "accepts_response_payload": False, "retry_attempt": 0, "retry_reason": ""})
        return envelope_id

    @property
    def api_url(self) -> str:
        """What `chat.slack.api_url` is set to."""
        return f"{self._server.url}/api/"

    def start(self) -> Self:
        self._server.start()
        return self

    def stop(self) -> None:
        self._server.stop()

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(self, kind: type[BaseException] | None, error: BaseException | None, trace: TracebackType | None) -> None:
        self.stop()

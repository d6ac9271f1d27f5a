"""The Slack testing server, served on a loopback port: `SlackSandbox().start()`, then `url` + `/api/`."""

from __future__ import annotations

from types import TracebackType
from typing import Self

from coding_agent.sandbox.http_server import BackgroundServer
from coding_agent.sandbox.slack.app import create_slack_app
from coding_agent.sandbox.slack.state import SlackState

__all__ = ["SlackSandbox"]


class SlackSandbox:
    def __init__(self, bot_token: str) -> None:
        self.state = SlackState(bot_token)
        self._server = BackgroundServer(create_slack_app(self.state))

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

"""The chat sources (`chat.slack`, SPEC 18): a Slack thread becomes a task.

Slack is a source beside the forges: `chat.slack` adds it, and `task_source` keeps naming
the forge(s) that hold the repositories the channels map to.
"""

from __future__ import annotations

import re

from pydantic import Field, SecretStr, field_validator, model_validator

from coding_agent.config.base import _Strict
from coding_agent.domain.tasks import canonical_project

__all__ = ["SlackConfig", "ChatConfig"]

# Slack's ids: a channel (C…, G… private, D… a direct message) and a user (U…, W… Enterprise Grid).
_CHANNEL_ID = re.compile(r"[CGD][A-Z0-9]{2,30}")
_USER_ID = re.compile(r"[UW][A-Z0-9]{2,30}")


class SlackConfig(_Strict):
    """A Slack app the agent answers as: its tokens, where its API is, and who and what it maps to.

    `app_token` (Socket Mode, no public URL) or `signing_secret` (the Events API on the web
    app's `/slack/events`); `api_url` is `https://slack.com/api/` unless GovSlack (or a
    test) says otherwise."""

    bot_token: SecretStr = Field(description="The bot's token (`xoxb-...`), for the Web API calls.")
    app_token: SecretStr | None = Field(
        default=None, description="The app-level token (`xapp-...`): events over Socket Mode, no public URL needed."
    )
    signing_secret: SecretStr | None = Field(
        default=None, description="The app's signing secret: events come to `POST /slack/events` (the Events API)."
    )
    api_url: str = Field(default="https://slack.com/api/", description="Slack's Web API (another for GovSlack or a test).")
    channels: dict[str, str] = Field(
        default_factory=dict, description="Channel id -> the repository a mention there works on (`github:owner/repo`)."
    )
    users: dict[str, str] = Field(default_factory=dict, description="Slack user id -> their forge login (write access needed).")

    @field_validator("bot_token")
    @classmethod
    def _bot_token(cls, value: SecretStr) -> SecretStr:
        if not value.get_secret_value().strip():
            raise ValueError("must not be empty (the bot's xoxb- token)")
        return value

    @field_validator("api_url")
    @classmethod
    def _api_url(cls, value: str) -> str:
        """Slack's clients join method names to it: it must be an http(s) URL ending in `/`."""
        if not value.startswith(("https://", "http://")):
            raise ValueError(f"must be an http(s) URL, got {value!r}")
        return value if value.endswith("/") else value + "/"

    @field_validator("channels")
    @classmethod
    def _channels(cls, value: dict[str, str]) -> dict[str, str]:
        for channel, repository in value.items():
            if _CHANNEL_ID.fullmatch(channel) is None:
                raise ValueError(f"channel {channel!r} is not a Slack channel id (e.g. C0123ABCD)")
            forge, _, project = repository.partition(":")
            try:
                if forge not in ("github", "gitlab"):
                    raise ValueError("no forge")
                canonical_project(forge, project)  # the rule every task key is held to
            except ValueError:
                raise ValueError(
                    f"channel {channel}: {repository!r} is not a repository "
                    "(expected 'github:owner/repo' or 'gitlab:group/project')"
                ) from None
        return value

    @field_validator("users")
    @classmethod
    def _users(cls, value: dict[str, str]) -> dict[str, str]:
        for user, login in value.items():
            if _USER_ID.fullmatch(user) is None:
                raise ValueError(f"user {user!r} is not a Slack user id (e.g. U0123ABCD)")
            if not login.strip():
                raise ValueError(f"user {user}: the forge login must not be empty")
        return value

    @model_validator(mode="after")
    def _a_way_in(self) -> SlackConfig:
        """Without one of them no event can reach the agent."""
        secret = self.signing_secret is not None and bool(self.signing_secret.get_secret_value().strip())
        app = self.app_token is not None and bool(self.app_token.get_secret_value().strip())
        if not (secret or app):
            raise ValueError("set app_token (Socket Mode) or signing_secret (the Events API at /slack/events)")
        return self

    def secrets(self) -> list[str]:
        """The tokens, for redaction like the forge's (SPEC 18)."""
        return [
            secret.get_secret_value()
            for secret in (self.bot_token, self.app_token, self.signing_secret)
            if secret is not None and secret.get_secret_value()
        ]


class ChatConfig(_Strict):
    """Chat sources beside the forges (SPEC 18); only Slack for now."""

    slack: SlackConfig | None = None

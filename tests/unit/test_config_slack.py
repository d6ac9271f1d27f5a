"""`chat.slack` (SPEC 18): what loads, and the clear error naming the key for what does not."""

from __future__ import annotations

import secrets
from typing import Any

import pytest

from coding_agent.config import parse_config
from coding_agent.errors import ConfigError
from coding_agent.sources.slack import thread_key

MINIMAL = {
    "task_source": "github",
    "github": {"owner": "acme", "token": "t-" + secrets.token_hex(8)},
    "llm": {"provider": "openai", "openai": {"model": "m", "base_url": "http://127.0.0.1:1/v1"}},
}


def _with(**slack: Any) -> dict[str, Any]:
    settings = {"bot_token": "xoxb-" + secrets.token_hex(8), "signing_secret": secrets.token_hex(16), **slack}
    return {**MINIMAL, "chat": {"slack": settings}}


def test_a_slack_section_loads_its_maps_and_its_secrets_are_redacted() -> None:
    data = _with(api_url="http://127.0.0.1:9/api", channels={"C0DEV": "github:acme/widgets"}, users={"U0ALICE": "alice"})
    config = parse_config(data)
    slack = config.chat.slack
    assert slack is not None and slack.api_url == "http://127.0.0.1:9/api/"
    assert slack.channels == {"C0DEV": "github:acme/widgets"} and slack.users == {"U0ALICE": "alice"}
    settings = data["chat"]["slack"]
    assert {settings["bot_token"], settings["signing_secret"]} <= set(config.secrets())


def test_no_slack_by_default() -> None:
    assert parse_config(MINIMAL).chat.slack is None


@pytest.mark.parametrize(
    ("slack", "named"),
    [
        ({"channels": {"#dev": "github:acme/widgets"}}, "chat.slack.channels: channel '#dev' is not a Slack channel id"),
        ({"channels": {"C0DEV": "acme/widgets"}}, "'acme/widgets' is not a repository"),
        ({"channels": {"C0DEV": "github:acme/../evil"}}, "is not a repository"),
        ({"channels": {"C0DEV": "gitlab:acme/widgets"}}, "chat.slack.channels.C0DEV: 'gitlab:acme/widgets' is on gitlab"),
        ({"users": {"alice": "alice"}}, "chat.slack.users: user 'alice' is not a Slack user id"),
        ({"api_url": "slack.com/api"}, "chat.slack.api_url: must be an http(s) URL"),
        ({"signing_secret": None}, "set app_token (Socket Mode) or signing_secret"),
        ({"bot_token": " "}, "chat.slack.bot_token: must not be empty"),
    ],
)
def test_a_bad_slack_section_is_refused_naming_the_key(slack: dict[str, Any], named: str) -> None:
    with pytest.raises(ConfigError) as error:
        parse_config(_with(**slack))
    assert named in str(error.value)


@pytest.mark.parametrize(
    ("channel", "ts"),
    [("C0DEV/../x", "1.2"), ("c0dev", "1.2"), ("C0DEV", "1.2/3"), ("C0DEV", "1"), ("C0DEV", "１.2"), ("", "1.2")],
)
def test_a_thread_key_is_made_of_slacks_own_characters_only(channel: str, ts: str) -> None:
    with pytest.raises(ValueError):
        thread_key(channel, ts)


def test_a_thread_key() -> None:
    assert thread_key("C0DEV", "1764620000.000100") == "slack:C0DEV/1764620000.000100"

"""`github.app` (SPEC 17): one credential of two, the key given once, the environment's key first."""

from __future__ import annotations

import secrets
from typing import Any

import pytest

from coding_agent.config import parse_config
from coding_agent.errors import ConfigError

LLM = {"provider": "openai", "openai": {"api_key": "k", "model": "m"}}


def _config(github: dict[str, Any], env: dict[str, str] | None = None) -> Any:
    return parse_config({"task_source": "github", "github": {"owner": "acme", **github}, "llm": LLM}, env=env or {})


def test_an_app_with_a_key_file_loads() -> None:
    config = _config({"app": {"app_id": 12, "private_key_file": "/etc/app.pem", "installation_id": 7}})
    assert config.github.app.app_id == 12 and config.github.app.installation_id == 7
    assert config.github.token is None


def test_a_token_and_an_app_at_once_is_an_error_naming_both_keys() -> None:
    with pytest.raises(ConfigError, match=r"github\.token and github\.app"):
        _config({"token": "t", "app": {"app_id": 12, "private_key_file": "/etc/app.pem"}})


@pytest.mark.parametrize("app", [{"app_id": 12}, {"app_id": 12, "private_key": "k", "private_key_file": "/k.pem"}])
def test_the_key_is_given_exactly_once(app: dict[str, Any]) -> None:
    with pytest.raises(ConfigError, match=r"github\.app\.private_key and github\.app\.private_key_file"):
        _config({"app": app})


def test_a_missing_app_id_names_the_key() -> None:
    with pytest.raises(ConfigError, match=r"github\.app\.app_id: required key is missing"):
        _config({"app": {"private_key_file": "/k.pem"}})


def test_the_environments_key_overrides_and_a_ci_github_token_is_not_taken_for_the_app() -> None:
    key = secrets.token_hex(16)
    env = {"GITHUB_APP_PRIVATE_KEY": key, "GITHUB_TOKEN": secrets.token_hex(16)}
    config = _config({"app": {"app_id": 12, "private_key_file": "/etc/app.pem"}}, env)
    assert config.github.app.private_key.get_secret_value() == key
    assert config.github.app.private_key_file is None
    assert config.github.token is None
    assert key not in repr(config)


def test_the_inline_key_and_its_lines_are_secrets_to_redact() -> None:
    lines = [secrets.token_urlsafe(48)[:64] for _ in range(3)]
    key = "-----BEGIN RSA PRIVATE KEY-----\n" + "\n".join(lines) + "\n-----END RSA PRIVATE KEY-----\n"
    config = _config({"app": {"app_id": 12, "private_key": key}})
    found = config.secrets({})
    assert key in found and all(line in found for line in lines)

"""Config loading: env substitution, overrides, and errors that name the key."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from coding_agent.config import load_config, parse_config
from coding_agent.errors import ConfigError

MINIMAL = {
    "task_source": "github",
    "github": {"owner": "acme", "token": "${GH_TOKEN}"},
    "llm": {"provider": "openai", "openai": {"model": "m", "base_url": "http://127.0.0.1:1/v1"}},
}


def test_env_substitution_and_overrides() -> None:
    config = parse_config(MINIMAL, env={"GH_TOKEN": "from-subst", "GITHUB_BOT_NAME": "robot", "OPENAI_API_KEY": "k-123"})
    assert config.github is not None
    assert config.github.token is not None and config.github.token.get_secret_value() == "from-subst"
    assert config.github.bot_name == "robot"
    assert config.llm.openai is not None and config.llm.openai.api_key is not None
    assert config.llm.openai.api_key.get_secret_value() == "k-123"
    assert sorted(config.secrets()) == ["from-subst", "k-123"]


def test_github_token_env_overrides_the_file() -> None:
    config = parse_config(MINIMAL, env={"GH_TOKEN": "file", "GITHUB_TOKEN": "env"})
    assert config.github is not None and config.github.token is not None
    assert config.github.token.get_secret_value() == "env"


def test_override_does_not_create_sections() -> None:
    config = parse_config(MINIMAL, env={"GH_TOKEN": "t", "GITLAB_TOKEN": "g"})
    assert config.gitlab is None


def test_unset_variable_names_key_and_variable() -> None:
    with pytest.raises(ConfigError) as error:
        parse_config(MINIMAL, env={})
    assert "github.token" in str(error.value) and "GH_TOKEN" in str(error.value)


def test_missing_provider_is_named() -> None:
    data = {**MINIMAL, "llm": {"openai": {"model": "m"}}}
    with pytest.raises(ConfigError) as error:
        parse_config(data, env={"GH_TOKEN": "t"})
    assert "llm.provider: required key is missing" in str(error.value)


def test_unknown_key_is_named() -> None:
    data = {**MINIMAL, "github": {**MINIMAL["github"], "ownr": "typo"}}
    with pytest.raises(ConfigError) as error:
        parse_config(data, env={"GH_TOKEN": "t"})
    assert "github.ownr: unknown key" in str(error.value)


def test_wrong_type_is_named() -> None:
    data = {**MINIMAL, "workers": "many"}
    with pytest.raises(ConfigError) as error:
        parse_config(data, env={"GH_TOKEN": "t"})
    assert "workers:" in str(error.value) and "integer" in str(error.value)


def test_provider_without_section() -> None:
    data = {**MINIMAL, "llm": {"provider": "ollama"}}
    with pytest.raises(ConfigError, match="no llm.ollama section"):
        parse_config(data, env={"GH_TOKEN": "t"})


def test_gitlab_needs_a_scope() -> None:
    data = {**MINIMAL, "task_source": ["github", "gitlab"], "gitlab": {"token": "x"}}
    with pytest.raises(ConfigError, match="gitlab.group or gitlab.project_id"):
        parse_config(data, env={"GH_TOKEN": "t"})


def test_mcp_json_form_is_accepted() -> None:
    data = {**MINIMAL, "mcpServers": {"fs": {"command": "npx", "args": ["-y", "pkg", "{workspace}"], "env": {"A": "1"}}}}
    config = parse_config(data, env={"GH_TOKEN": "t"})
    assert [(s.mcp_server_name, s.command, s.env) for s in config.mcp_servers[1:]] == [
        ("fs", ["npx", "-y", "pkg", "{workspace}"], {"A": "1"})
    ]
    assert config.mcp_servers[0].mcp_server_name == "workspace"  # SPEC 6: the built-in server stays


def test_the_built_in_server_joins_the_configured_ones_unless_turned_off() -> None:
    other = {"mcp_server_name": "team", "command": ["team-tools"]}
    kept = parse_config({**MINIMAL, "mcp_servers": [other]}, env={"GH_TOKEN": "t"})
    assert [s.mcp_server_name for s in kept.mcp_servers] == ["workspace", "team"]
    off = parse_config({**MINIMAL, "mcp_servers": [other], "tools": {"builtin_workspace": False}}, env={"GH_TOKEN": "t"})
    assert [s.mcp_server_name for s in off.mcp_servers] == ["team"]
    own = {"mcp_server_name": "workspace", "command": ["{python}", "-m", "coding_agent.tools.workspace_server", "--root", "{workspace}"], "tools_allow": ["view"]}
    replaced = parse_config({**MINIMAL, "mcp_servers": [own, other]}, env={"GH_TOKEN": "t"})
    assert [(s.mcp_server_name, s.tools_allow) for s in replaced.mcp_servers] == [("workspace", ["view"]), ("team", None)]


def test_unreadable_file(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="cannot read config file"):
        load_config(tmp_path / "absent.yaml")


def test_invalid_yaml(tmp_path: Path) -> None:
    path = tmp_path / "bad.yaml"
    path.write_text("task_source: [github\n")
    with pytest.raises(ConfigError, match="not valid YAML"):
        load_config(path)


def test_example_config_is_valid() -> None:
    example = Path(__file__).resolve().parents[2] / "config.example.yaml"
    config = load_config(example, env={"GITHUB_TOKEN": "t"})
    assert config.llm.provider == "ollama"
    # Every top-level key of the example is a real key (and vice versa for documented ones).
    documented = set(yaml.safe_load(example.read_text()))
    assert documented <= set(type(config).model_fields)


def test_a_retired_scheduling_key_loads_with_a_warning_naming_it(caplog: pytest.LogCaptureFixture) -> None:
    raw = {**MINIMAL, "scheduling": {"starts_at_once": 4, "start_wait_seconds": 30, "lease_seconds": 90}}
    with caplog.at_level("WARNING", logger="coding_agent.config.service_sections"):
        config = parse_config(raw, env={"GH_TOKEN": "t"})
    assert config.scheduling.lease_seconds == 90
    assert "scheduling.starts_at_once is no longer used" in caplog.text
    assert "scheduling.start_wait_seconds is no longer used" in caplog.text
    with pytest.raises(ConfigError, match="scheduling.starts_at_one"):
        parse_config({**MINIMAL, "scheduling": {"starts_at_one": 4}}, env={"GH_TOKEN": "t"})


def test_the_retired_webhooks_max_concurrent_loads_with_a_warning_naming_it(caplog: pytest.LogCaptureFixture) -> None:
    """A config written for the slot rule (SPEC 15 replaced it by a budget of bytes in
    flight) still loads, and says the key does nothing now."""
    raw = {**MINIMAL, "webhooks": {"max_concurrent": 8, "body_timeout_seconds": 5}}
    with caplog.at_level("WARNING", logger="coding_agent.config.service_sections"):
        config = parse_config(raw, env={"GH_TOKEN": "t"})
    assert config.webhooks.body_timeout_seconds == 5
    assert "webhooks.max_concurrent is no longer used (bodies are bounded by the bytes in flight" in caplog.text

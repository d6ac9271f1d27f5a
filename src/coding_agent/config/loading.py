"""Loading a config file: size limits, `${ENV}` substitution, env overrides, and
validation errors that name each bad key (`load_config` is the one entry point).
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import yaml
from pydantic import ValidationError

from coding_agent.config.model import AgentConfig
from coding_agent.errors import ConfigError

__all__ = ["DEFAULT_CONFIG_PATH", "parse_config", "MAX_CONFIG_BYTES", "MAX_CONFIG_VALUES", "load_config"]


DEFAULT_CONFIG_PATH = "config.yaml"


_ENV_PATTERN = re.compile(r"\$\{(?P<name>[A-Za-z_][A-Za-z0-9_]*)(?::-(?P<default>[^}]*))?\}")


# Environment variables that override a key, when that key's section exists (SPEC 11).
_ENV_OVERRIDES: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("GITHUB_TOKEN", ("github", "token")),
    ("GITLAB_TOKEN", ("gitlab", "token")),
    ("GITHUB_BOT_NAME", ("github", "bot_name")),
    ("GITLAB_BOT_NAME", ("gitlab", "bot_name")),
    ("OPENAI_API_KEY", ("llm", "openai", "api_key")),
)


def _substitute(value: Any, path: str, env: Mapping[str, str], lenient: bool = False) -> Any:
    """Replace `${VAR}` / `${VAR:-default}` in every string, naming the key when VAR is unset
    (`lenient`: an unset VAR becomes empty, for commands that only read local state)."""
    if isinstance(value, dict):
        return {key: _substitute(item, f"{path}.{key}" if path else str(key), env, lenient) for key, item in value.items()}
    if isinstance(value, list):
        return [_substitute(item, f"{path}[{index}]", env, lenient) for index, item in enumerate(value)]
    if not isinstance(value, str):
        return value

    def replace(match: re.Match[str]) -> str:
        name, default = match["name"], match["default"]
        if name in env:
            return env[name]
        if default is not None:
            return default
        if lenient:
            return ""
        raise ConfigError(f"config key {path}: environment variable {name} is not set")

    return _ENV_PATTERN.sub(replace, value)


def _apply_env_overrides(data: dict[str, Any], env: Mapping[str, str]) -> None:
    github = data.get("github")
    app = github.get("app") if isinstance(github, dict) else None
    if isinstance(app, dict) and env.get("GITHUB_APP_PRIVATE_KEY"):
        # The key from the environment replaces the config's, inline or as a file.
        app.pop("private_key_file", None)
        app["private_key"] = env["GITHUB_APP_PRIVATE_KEY"]
    for variable, path in _ENV_OVERRIDES:
        value = env.get(variable)
        if not value:
            continue
        if variable == "GITHUB_TOKEN" and isinstance(app, dict):
            continue  # an app is configured: a GITHUB_TOKEN in the environment (as CI sets) is not its credential
        node: Any = data
        for part in path[:-1]:
            node = node.get(part) if isinstance(node, dict) else None
            if node is None:
                break
        if isinstance(node, dict):
            node[path[-1]] = value


def _format_validation_error(error: ValidationError, source: str) -> str:
    """One line: every bad key with what is wrong with it (a config error is one line)."""
    problems = []
    for item in error.errors():
        location = ".".join(str(part) for part in item["loc"])
        message = item["msg"].removeprefix("Value error, ")
        if item["type"] == "extra_forbidden":
            message = "unknown key"
        elif item["type"] == "missing":
            message = "required key is missing"
        problems.append(f"{location}: {message}" if location else message)
    return f"invalid configuration in {source}: " + "; ".join(problems)


def parse_config(
    data: Any, source: str = "<config>", env: Mapping[str, str] | None = None, local_only: bool = False
) -> AgentConfig:
    """Validate an already-parsed YAML document (after env substitution and overrides).

    `local_only`: the caller reads only the local state (status, memory, pause), so an
    unset `${VAR}` (typically a token) is left empty instead of being an error.
    """
    env = os.environ if env is None else env
    if not isinstance(data, dict):
        raise ConfigError(f"invalid configuration in {source}: the top level must be a mapping of keys")
    data = _substitute(data, "", env, local_only)
    _apply_env_overrides(data, env)
    try:
        return AgentConfig.model_validate(data)
    except ValidationError as error:
        raise ConfigError(_format_validation_error(error, source)) from None


# Bounds on what a config file may make the loader do. A real config is a few KiB with a
# few hundred values; an alias bomb ("billion laughs") is a few hundred bytes whose aliases
# expand to billions of values, which the ${ENV} substitution would then copy.
MAX_CONFIG_BYTES = 1024 * 1024


MAX_CONFIG_VALUES = 100_000


def _expanded_size(data: Any, limit: int) -> int:
    """How many values `data` holds once every alias is expanded, stopping past `limit`.

    Aliases are shared objects in the loaded document, so each distinct node is sized
    once (memoised by identity): the cost is the document's size, not its expansion.
    """
    sizes: dict[int, int] = {}

    def size(node: Any) -> int:
        if not isinstance(node, (dict, list)):
            return 1
        known = sizes.get(id(node))
        if known is not None:
            return known
        children = node.values() if isinstance(node, dict) else node
        total = 1
        for child in children:
            total += size(child)
            if total > limit:
                break
        sizes[id(node)] = total
        return total

    return size(data)


def load_config(path: str | Path, env: Mapping[str, str] | None = None, local_only: bool = False) -> AgentConfig:
    """Read, substitute and validate the YAML file at `path` (`local_only`: see `parse_config`);
    any problem is one `ConfigError`."""
    path = Path(path)
    try:
        with path.open("rb") as handle:
            raw = handle.read(MAX_CONFIG_BYTES + 1)
    except OSError as error:
        raise ConfigError(f"cannot read config file {path}: {error.strerror or error}") from None
    if len(raw) > MAX_CONFIG_BYTES:
        raise ConfigError(f"config file {path} is over {MAX_CONFIG_BYTES} bytes; is it the right file?")
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as error:
        raise ConfigError(f"config file {path} is not UTF-8 text (byte {error.start})") from None
    try:
        data = yaml.safe_load(text)
        if _expanded_size(data, MAX_CONFIG_VALUES) > MAX_CONFIG_VALUES:
            raise ConfigError(
                f"config file {path} expands to over {MAX_CONFIG_VALUES} values (YAML alias bomb?)"
            )
    except yaml.YAMLError as error:
        detail = " ".join(str(error).split())
        raise ConfigError(f"config file {path} is not valid YAML: {detail}") from None
    except RecursionError:
        raise ConfigError(f"config file {path} is nested too deeply") from None
    return parse_config(data, str(path), env, local_only)

"""The configuration file: pydantic models of the YAML, `${ENV}` substitution, env overrides.

Every model forbids unknown keys, so a typo is an error that names the key rather than a
setting silently ignored. `load_config` is the one entry point; it raises `ConfigError`
with a message that names each bad key and what is wrong with it.
"""

from __future__ import annotations

import os
import re
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, SecretStr, ValidationError, field_validator, model_validator
from sqlalchemy.engine import make_url
from sqlalchemy.exc import ArgumentError, NoSuchModuleError

from coding_agent.domain.egress_policy import EgressPolicyError, parse_entry
from coding_agent.errors import ConfigError
from coding_agent.prompts.prompting import text

__all__ = [
    "AgentConfig",
    "GitHubConfig",
    "GitLabConfig",
    "LabelConfig",
    "LLMConfig",
    "OpenAICompatibleConfig",
    "OllamaConfig",
    "MCPServerConfig",
    "WORKSPACE_SYSTEM_PROMPT",
    "builtin_workspace_server",
    "with_sandbox_mode",
    "ToolsConfig",
    "TaskStopConfig",
    "CommentDetectionConfig",
    "PauseResumeConfig",
    "ProgressCommentConfig",
    "EgressConfig",
    "SetupConfig",
    "SetupOverride",
    "load_config",
    "parse_config",
    "DEFAULT_CONFIG_PATH",
]

DEFAULT_CONFIG_PATH = "config.yaml"


class _Strict(BaseModel):
    """Base of every section: unknown keys are errors, values are validated on assignment."""

    model_config = ConfigDict(extra="forbid", validate_assignment=True)


class LabelConfig(_Strict):
    """Label names of the lifecycle (SPEC 3); each forge section carries its own."""

    bot_label: str = "coding agent"
    processing_label: str = "coding agent processing"
    done_label: str = "coding agent done"
    paused_label: str = "coding agent paused"
    stopped_label: str = "coding agent stopped"
    failed_label: str = "coding agent failed"

    @field_validator("bot_label", "processing_label", "done_label", "paused_label", "stopped_label", "failed_label")
    @classmethod
    def _not_blank(cls, value: str) -> str:
        """An empty label matches nothing: the agent would never see a trigger."""
        if not value.strip():
            raise ValueError("must not be empty")
        return value

    @model_validator(mode="after")
    def _distinct(self) -> LabelConfig:
        """Two lifecycle states under one label could not be told apart."""
        seen: dict[str, str] = {}
        for key in LabelConfig.model_fields:
            value = getattr(self, key)
            other = seen.setdefault(value.strip().lower(), key)
            if other != key:
                raise ValueError(f"{key} and {other} must be different labels")
        return self


class GitHubConfig(LabelConfig):
    api_url: str = "https://api.github.com"
    token: SecretStr | None = None
    owner: str
    repos: list[str] = Field(default_factory=list)
    query: str = ""
    assignee: str | None = None
    bot_name: str | None = None


class GitLabConfig(LabelConfig):
    api_url: str = "https://gitlab.com"
    token: SecretStr | None = None
    group: str | None = None
    project_id: int | str | None = None
    assignee: str | None = None
    bot_name: str | None = None

    @model_validator(mode="after")
    def _one_scope(self) -> GitLabConfig:
        if self.group is None and self.project_id is None:
            raise ValueError("set gitlab.group or gitlab.project_id: the agent never searches a whole instance")
        return self


class _ProviderCommon(_Strict):
    model: str | None = None
    context_length: int = Field(default=32768, gt=0)
    max_tokens: int = Field(default=4096, gt=0)
    temperature: float = Field(default=0.2, ge=0)
    timeout_seconds: float = Field(default=300, gt=0)


class OpenAICompatibleConfig(_ProviderCommon):
    """`llm.openai` and `llm.lmstudio`: any server speaking OpenAI chat completions."""

    base_url: str = "https://api.openai.com/v1"
    api_key: SecretStr | None = None


class LMStudioConfig(OpenAICompatibleConfig):
    base_url: str = "http://localhost:1234/v1"


class OllamaConfig(_ProviderCommon):
    endpoint: str = "http://localhost:11434"


ProviderName = Literal["openai", "lmstudio", "ollama"]


class LLMConfig(_Strict):
    provider: ProviderName
    function_calling: bool = True
    openai: OpenAICompatibleConfig | None = None
    lmstudio: LMStudioConfig | None = None
    ollama: OllamaConfig | None = None

    @model_validator(mode="after")
    def _provider_section(self) -> LLMConfig:
        section = getattr(self, self.provider)
        if section is None:
            raise ValueError(f"llm.provider is {self.provider!r} but there is no llm.{self.provider} section")
        if not section.model:
            raise ValueError(f"llm.{self.provider}.model is required")
        return self

    @property
    def active(self) -> OpenAICompatibleConfig | OllamaConfig:
        """The section of the chosen provider."""
        return getattr(self, self.provider)


class MCPServerConfig(_Strict):
    """One MCP server (seed 003 section 3.2). `{workspace}` in command or env is the run's workspace."""

    mcp_server_name: str = Field(pattern=r"^[A-Za-z0-9_.-]+$")
    command: list[str] = Field(min_length=1)
    env: dict[str, str] = Field(default_factory=dict)
    system_prompt: str = ""
    tools_allow: list[str] | None = None

    @field_validator("command")
    @classmethod
    def _this_interpreter(cls, command: list[str]) -> list[str]:
        """`{python}` is this interpreter, and `coding-agent ...` runs this installation's CLI
        through it: neither is looked up on PATH, so the config works from cron or a venv
        that is not activated."""
        command = [sys.executable if item == "{python}" else item for item in command]
        if command[0] == "coding-agent":
            command = [sys.executable, "-m", "coding_agent.cli", *command[1:]]
        return command


# -- the built-in workspace MCP server: the default of `mcp_servers` ---------------------
# Here, not beside the server (`tools.workspace_server`), so that loading a config imports
# neither the MCP server stack nor anything above this floor.

WORKSPACE_SYSTEM_PROMPT = text("workspace_server.j2")

def builtin_workspace_server() -> dict[str, Any]:
    """The `mcp_servers` entry that starts the built-in workspace server for a run.

    It runs with this interpreter, so it works whether or not `coding-agent` is on PATH.
    """
    return {
        "mcp_server_name": "workspace",
        "command": [sys.executable, "-m", "coding_agent.tools.workspace_server", "--root", "{workspace}"],
        "system_prompt": WORKSPACE_SYSTEM_PROMPT,
    }


_WORKSPACE_SERVER_MARKERS = ("coding_agent.tools.workspace_server", "mcp-workspace")


def with_sandbox_mode(command: list[str], mode: str) -> list[str]:
    """`command` with `--sandbox MODE` when it starts the built-in workspace server, else as is.

    The operator chooses the mode once (`security.sandbox`); every entry that runs the
    built-in server gets it, whatever the entry itself says.
    """
    if not any(marker in part for part in command for marker in _WORKSPACE_SERVER_MARKERS):
        return command
    result: list[str] = []
    skip = False
    for part in command:
        if skip:
            skip = False
            continue
        if part == "--sandbox":
            skip = True
            continue
        if part.startswith("--sandbox="):
            continue
        result.append(part)
    return [*result, "--sandbox", mode]


class ToolsConfig(_Strict):
    call_timeout_seconds: float = Field(default=120, gt=0)
    startup_timeout_seconds: float = Field(default=60, gt=0)
    max_output_chars: int = Field(default=20000, gt=0)


class WorkspaceConfig(_Strict):
    """The run's clone of the repository and how its result is delivered (SPEC 7)."""

    base_dir: str = "workspaces"
    # `git clone --depth`: 1 (shallow) is enough to commit and push; 0 clones the full history.
    clone_depth: int = Field(default=1, ge=0)
    # Each of AGENTS.md, CLAUDE.md, .github/copilot-instructions.md enters the system
    # prompt cut to this many bytes; 0 leaves them out.
    rules_max_bytes: int = Field(default=16384, ge=0)
    # Upper bound of one git command (clone, push ...) run by the agent itself.
    git_timeout_seconds: float = Field(default=300, gt=0)
    # A run's clone (and its git directory) is deleted when the run ends done, failed or
    # stopped; a paused run's is kept. True keeps finished runs' clones too (debugging).
    keep_finished: bool = False


class SchedulingConfig(_Strict):
    interval_seconds: float = Field(default=60, gt=0)
    lease_seconds: float = Field(default=900, gt=0)


class ContextStorageConfig(_Strict):
    base_dir: str = "contexts"
    # Above this share of the provider's context_length (estimated tokens), older
    # messages are summarised; below it the history is append-only (prefix caching).
    compression_threshold: float = Field(default=0.7, gt=0, le=1)
    keep_recent_messages: int = Field(default=5, ge=1)
    cleanup_days: float = Field(default=30, gt=0)


# Whole words or phrases that mark a comment as "we are done here" (SPEC 9.1).
DEFAULT_COMPLETION_KEYWORDS: tuple[str, ...] = (
    "done",
    "thanks",
    "thank you",
    "lgtm",
    "looks good",
    "resolved",
    "ありがとう",
    "ありがとうございます",
    "ありがとうございました",
    "完了",
    "解決",
)


class CommentHandlingConfig(_Strict):
    """How the task's comments become the conversation (SPEC 9.1) and follow-ups (SPEC 3)."""

    max_comment_count: int = Field(default=10, ge=0)
    completion_keywords: list[str] = Field(default_factory=lambda: list(DEFAULT_COMPLETION_KEYWORDS))
    followup_days: float = Field(default=7, gt=0)


class MemoryConfig(_Strict):
    """Memories the model writes after each run (SPEC 9.2)."""

    enabled: bool = True
    channel_messages_limit: int = Field(default=50, ge=1)
    active_channel_days: float = Field(default=7, gt=0)
    thread_memory_days: float = Field(default=7, gt=0)


class LoggingConfig(_Strict):
    dir: str = "logs"
    level: Literal["DEBUG", "INFO", "WARNING", "ERROR"] = "INFO"
    backup_count: int = Field(default=14, ge=0)


class DatabaseConfig(_Strict):
    url: str = "sqlite:///coding-agent.db"

    @field_validator("url")
    @classmethod
    def _usable_url(cls, value: str) -> str:
        """Checked at start, not at the first query; the URL itself is never echoed (it may
        hold a password)."""
        try:
            url = make_url(value)
            backend = url.get_backend_name()
            url.get_dialect()
        except (ArgumentError, ValueError):
            raise ValueError("not a database URL (sqlite:///path/to/state.db or postgresql://user@host/db)") from None
        except NoSuchModuleError:
            raise ValueError("unknown database kind; use sqlite:///... or postgresql://...") from None
        if backend not in ("sqlite", "postgresql"):
            raise ValueError(f"{backend} is not supported; use sqlite:///... or postgresql://...")
        if backend == "sqlite" and url.database in (None, "", ":memory:"):
            raise ValueError("SQLite needs a file (sqlite:///path/to/state.db): an in-memory store forgets every task")
        return value


class QueueConfig(_Strict):
    """Between producer and workers (SPEC 11.1): `memory` in-process, or RabbitMQ."""

    backend: Literal["memory", "rabbitmq"] = "memory"
    url: str = "amqp://guest:guest@127.0.0.1:5672/"
    name: str = Field(default="coding-agent.tasks", min_length=1, max_length=200)
    prefetch: int | None = Field(default=None, ge=1)  # None: `workers`


class WebhooksConfig(_Strict):
    """`POST /webhooks/github|gitlab` (SPEC 11.2); an endpoint without its secret is off."""

    github_secret: SecretStr | None = None
    gitlab_token: SecretStr | None = None


class BudgetConfig(_Strict):
    max_tokens: int | None = Field(default=None, gt=0)
    max_seconds: float | None = Field(default=None, gt=0)


class EgressConfig(_Strict):
    """What setup and `run` may reach through the host's egress proxy (SPEC 7.1).

    Entries: `host` (ports 80/443), `host:port`, `*.domain`. Empty: no network at all.
    Loopback, link-local and metadata addresses need an exact `host:port` entry.
    """

    setup_hosts: list[str] = Field(default_factory=list)
    run_hosts: list[str] = Field(default_factory=list)

    @field_validator("setup_hosts", "run_hosts")
    @classmethod
    def _entries(cls, entries: list[str]) -> list[str]:
        for entry in entries:
            try:
                parse_entry(entry)
            except EgressPolicyError as error:
                raise ValueError(f"{error} (an entry is host, host:port or *.domain)") from None
        return entries


class SecurityConfig(_Strict):
    allow_untrusted_triggers: bool = False
    # SPEC 15: `bwrap` runs the model's commands in bubblewrap and refuses to start where
    # bwrap cannot run; `none` runs them unsandboxed (warned in the log at every start).
    sandbox: Literal["bwrap", "none"] = "bwrap"
    egress: EgressConfig = Field(default_factory=EgressConfig)


class SetupOverride(_Strict):
    """Per-repository setup (`setup.repositories["owner/name"]`): unset keys inherit."""

    commands: list[str] | None = None
    timeout_seconds: float | None = Field(default=None, gt=0)
    max_disk_mb: int | None = Field(default=None, gt=0)
    from_repository: bool | None = None
    cache: bool | None = None


class SetupConfig(_Strict):
    """Environment setup before the first model request (SPEC 7.1).

    `commands` run in the workspace inside the sandbox, through the egress proxy with
    `security.egress.setup_hosts`. `from_repository: true` runs `.coding-agent/setup.sh`
    read from the default branch instead (never from a PR head). `cache`: keep what the
    setup left in the workspace, per repository and lockfile hash, under `cache_dir`.
    """

    commands: list[str] = Field(default_factory=list)
    timeout_seconds: float = Field(default=600, gt=0)
    # What the setup may write (workspace growth, and its private /tmp), in MiB: past it,
    # its whole process tree is killed and what it created is removed.
    max_disk_mb: int = Field(default=8192, gt=0)
    from_repository: bool = False
    cache: bool = True
    cache_dir: str = "setup-cache"
    # Keep this much of the setup's output (its tail) for the model's first turn.
    output_tail_chars: int = Field(default=4000, ge=0)
    repositories: dict[str, SetupOverride] = Field(default_factory=dict)


class RetryConfig(_Strict):
    """Transient-error retries for forge and model calls (SPEC 4)."""

    retries: int = Field(default=3, ge=0)
    base_delay_seconds: float = Field(default=1.0, ge=0)
    max_delay_seconds: float = Field(default=60.0, ge=0)
    # One forge request, whole (also when answered through the conditional-request cache).
    forge_timeout_seconds: float = Field(default=30.0, gt=0)


class TaskStopConfig(_Strict):
    """Stop a run when the bot is unassigned (SPEC 8.2, seed 002)."""

    enabled: bool = True
    # 0 disables the check; N checks on iterations 1, 1+N, 1+2N, ...
    check_interval: int = Field(default=1, ge=0)
    # Never re-read the assignees more often than this (the first check always runs).
    min_check_interval_seconds: float = Field(default=30, ge=0)


class CommentDetectionConfig(_Strict):
    """Forward comments posted while a run works to the model (SPEC 8.1, seed 000)."""

    enabled: bool = True


class PauseResumeConfig(_Strict):
    """Pause and resume (SPEC 8.3). `signal_file` defaults to <context_storage.base_dir>/pause_signal."""

    enabled: bool = True
    signal_file: str | None = None


class ProgressCommentConfig(_Strict):
    """One progress comment per run, edited in place (SPEC 8.4)."""

    enabled: bool = True
    min_edit_interval_seconds: float = Field(default=5, ge=0)


class LoopGuardConfig(_Strict):
    """A model repeating one tool call with one result (or one reply) is corrected, then
    stopped (SPEC 4): weak and local models loop, and must never burn a budget silently."""

    enabled: bool = True
    warn_after: int = Field(default=3, ge=2)
    fail_after: int = Field(default=5, ge=2)

    @model_validator(mode="after")
    def _fail_after_warning(self) -> LoopGuardConfig:
        if self.fail_after <= self.warn_after:
            raise ValueError("loop_guard.fail_after must be greater than loop_guard.warn_after")
        return self


class PlanningReflectionConfig(_Strict):
    enabled: bool = True
    trigger_interval: int = Field(default=3, ge=0)  # reflect after every N ended actions; 0: never
    trigger_on_error: bool = True


class PlanningRevisionConfig(_Strict):
    max_revisions: int = Field(default=3, ge=0)


class PlanningVerificationConfig(_Strict):
    enabled: bool = True
    max_rounds: int = Field(default=2, ge=1)


class PlanningConfig(_Strict):
    """Planning mode (SPEC 10): plan, act, reflect, revise, verify inside the section-4 loop."""

    enabled: bool = False
    max_actions: int = Field(default=20, ge=1)
    max_steps_per_action: int = Field(default=10, ge=1)
    reflection: PlanningReflectionConfig = Field(default_factory=PlanningReflectionConfig)
    revision: PlanningRevisionConfig = Field(default_factory=PlanningRevisionConfig)
    verification: PlanningVerificationConfig = Field(default_factory=PlanningVerificationConfig)


class DashboardConfig(_Strict):
    """The web dashboard of `serve` (SPEC 11.3). Beyond localhost every page needs `token`."""

    enabled: bool = True
    bind: str = Field(default="127.0.0.1:8080", pattern=r"^\[?[A-Za-z0-9.:-]*\]?:[0-9]{1,5}$")
    token: SecretStr | None = None

    @property
    def host_port(self) -> tuple[str, int]:
        host, _, port = self.bind.rpartition(":")
        return host.strip("[]") or "0.0.0.0", int(port)

    @property
    def local_only(self) -> bool:
        """Bound to a loopback address: nothing beyond this machine can reach it."""
        return self.host_port[0] in ("127.0.0.1", "localhost", "::1")

    @model_validator(mode="after")
    def _token_beyond_localhost(self) -> DashboardConfig:
        if self.enabled and not self.local_only and (self.token is None or not self.token.get_secret_value()):
            raise ValueError(f"dashboard.bind {self.bind} is beyond localhost: set dashboard.token")
        return self


SourceName = Literal["github", "gitlab"]


class AgentConfig(_Strict):
    task_source: SourceName | list[SourceName]
    github: GitHubConfig | None = None
    gitlab: GitLabConfig | None = None
    llm: LLMConfig
    max_llm_process_num: int = Field(default=50, gt=0)
    mcp_servers: list[MCPServerConfig] = Field(default_factory=lambda: [MCPServerConfig(**builtin_workspace_server())])
    tools: ToolsConfig = Field(default_factory=ToolsConfig)
    workspace: WorkspaceConfig = Field(default_factory=WorkspaceConfig)
    workers: int = Field(default=1, ge=1)
    scheduling: SchedulingConfig = Field(default_factory=SchedulingConfig)
    context_storage: ContextStorageConfig = Field(default_factory=ContextStorageConfig)
    logging: LoggingConfig = Field(default_factory=LoggingConfig)
    database: DatabaseConfig = Field(default_factory=DatabaseConfig)
    queue: QueueConfig = Field(default_factory=QueueConfig)
    webhooks: WebhooksConfig = Field(default_factory=WebhooksConfig)
    budget: BudgetConfig = Field(default_factory=BudgetConfig)
    security: SecurityConfig = Field(default_factory=SecurityConfig)
    setup: SetupConfig = Field(default_factory=SetupConfig)
    retry: RetryConfig = Field(default_factory=RetryConfig)
    task_stop: TaskStopConfig = Field(default_factory=TaskStopConfig)
    comment_detection: CommentDetectionConfig = Field(default_factory=CommentDetectionConfig)
    pause_resume: PauseResumeConfig = Field(default_factory=PauseResumeConfig)
    progress_comment: ProgressCommentConfig = Field(default_factory=ProgressCommentConfig)
    loop_guard: LoopGuardConfig = Field(default_factory=LoopGuardConfig)
    planning: PlanningConfig = Field(default_factory=PlanningConfig)
    language: Literal["en", "ja"] = "en"
    comment_handling: CommentHandlingConfig = Field(default_factory=CommentHandlingConfig)
    memory: MemoryConfig = Field(default_factory=MemoryConfig)
    persona: str | None = None
    dashboard: DashboardConfig = Field(default_factory=DashboardConfig)

    @model_validator(mode="before")
    @classmethod
    def _accept_mcp_json_form(cls, data: Any) -> Any:
        """Accept the common `mcpServers` form (`.mcp.json`) beside `mcp_servers`."""
        if isinstance(data, dict) and "mcpServers" in data:
            data = dict(data)
            servers = data.pop("mcpServers") or {}
            if not isinstance(servers, dict):
                raise ValueError("mcpServers must be a mapping of server name to {command, args, env}")
            converted = list(data.get("mcp_servers") or [])
            for name, spec in servers.items():
                spec = dict(spec or {})
                command = [spec.pop("command", "")] + list(spec.pop("args", []) or [])
                converted.append({"mcp_server_name": name, "command": command, **spec})
            data["mcp_servers"] = converted
        return data

    @model_validator(mode="after")
    def _sources_configured(self) -> AgentConfig:
        for name in self.sources:
            if getattr(self, name) is None:
                raise ValueError(f"task_source includes {name!r} but there is no {name} section")
        names = [server.mcp_server_name for server in self.mcp_servers]
        duplicates = sorted({name for name in names if names.count(name) > 1})
        if duplicates:
            raise ValueError(f"mcp_servers: duplicate mcp_server_name {', '.join(duplicates)}")
        # The built-in workspace server sandboxes `run` as security.sandbox says.
        for server in self.mcp_servers:
            command = with_sandbox_mode(server.command, self.security.sandbox)
            if command != server.command:
                server.command = command
        return self

    @property
    def sources(self) -> list[SourceName]:
        return [self.task_source] if isinstance(self.task_source, str) else list(self.task_source)

    def secrets(self) -> list[str]:
        """Every secret value in the configuration, for redaction in logs and comments."""
        values: list[str] = []
        for section in (self.github, self.gitlab, self.llm.openai, self.llm.lmstudio, self.dashboard):
            secret = getattr(section, "token", None) or getattr(section, "api_key", None)
            if secret is not None and secret.get_secret_value():
                values.append(secret.get_secret_value())
        for hook_secret in (self.webhooks.github_secret, self.webhooks.gitlab_token):
            if hook_secret is not None and hook_secret.get_secret_value():
                values.append(hook_secret.get_secret_value())
        return values


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
    for variable, path in _ENV_OVERRIDES:
        value = env.get(variable)
        if not value:
            continue
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

"""The whole configuration file as one model, `AgentConfig`, with its cross-section checks.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any, Literal

from pydantic import Field, model_validator

from coding_agent.config.base import _Strict
from coding_agent.config.chat import ChatConfig
from coding_agent.config.forges import GitHubConfig, GitLabConfig
from coding_agent.config.llm import LLMConfig
from coding_agent.config.run_sections import (
    BudgetConfig,
    CiConfig,
    CommentDetectionConfig,
    CommentHandlingConfig,
    ContextStorageConfig,
    LoopGuardConfig,
    MemoryConfig,
    PauseResumeConfig,
    PlanningConfig,
    ProgressCommentConfig,
    SecurityConfig,
    SetupConfig,
    TaskStopConfig,
    WorkspaceConfig,
)
from coding_agent.config.service_sections import (
    DashboardConfig,
    DatabaseConfig,
    LoggingConfig,
    QueueConfig,
    RetryConfig,
    SchedulingConfig,
    WebhooksConfig,
)
from coding_agent.config.tools import (
    BUILTIN_SERVER_NAME,
    MCPServerConfig,
    ToolsConfig,
    WorkspaceServerConfig,
    builtin_workspace_server,
    operators_workspace_server,
)
from coding_agent.redaction import proxy_passwords

__all__ = ["SourceName", "AgentConfig"]


SourceName = Literal["github", "gitlab"]


class AgentConfig(_Strict):
    task_source: SourceName | list[SourceName]
    github: GitHubConfig | None = None
    gitlab: GitLabConfig | None = None
    llm: LLMConfig
    max_llm_process_num: int = Field(default=50, gt=0)
    mcp_servers: list[MCPServerConfig] = Field(default_factory=list)
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
    ci: CiConfig = Field(default_factory=CiConfig)
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
    chat: ChatConfig = Field(default_factory=ChatConfig)

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
        slack = self.chat.slack
        for channel, repository in (slack.channels if slack is not None else {}).items():
            forge = repository.partition(":")[0]
            if forge not in self.sources:
                raise ValueError(f"chat.slack.channels.{channel}: {repository!r} is on {forge}, which task_source does not name")
        names = [server.mcp_server_name for server in self.mcp_servers]
        # SPEC 6: configuring a server never removes the built-in one; an entry of the
        # operator's own named `workspace` takes its place (their command, their allow-list).
        if self.tools.builtin_workspace and BUILTIN_SERVER_NAME not in names:
            self.mcp_servers.insert(0, builtin_workspace_server(self.security.sandbox))
            names.insert(0, BUILTIN_SERVER_NAME)
        duplicates = sorted({name for name in names if names.count(name) > 1})
        if duplicates:
            raise ValueError(f"mcp_servers: duplicate mcp_server_name {', '.join(duplicates)}")
        # An operator's own entry named `workspace` is the built-in server started their
        # way: it sandboxes `run` as security.sandbox says, like the one the config adds.
        for index, server in enumerate(self.mcp_servers):
            if server.mcp_server_name == BUILTIN_SERVER_NAME and not isinstance(server, WorkspaceServerConfig):
                self.mcp_servers[index] = operators_workspace_server(server, self.security.sandbox)
        return self

    @property
    def sources(self) -> list[SourceName]:
        return [self.task_source] if isinstance(self.task_source, str) else list(self.task_source)

    def secrets(self, environ: Mapping[str, str] | None = None) -> list[str]:
        """Every secret value in the configuration, for redaction in logs and comments, and
        the passwords of the proxy variables in `environ` (default: this process's), which
        git and the HTTP clients are given."""
        values: list[str] = proxy_passwords(os.environ if environ is None else environ)
        for section in (self.github, self.gitlab, self.llm.openai, self.llm.lmstudio, self.dashboard):
            secret = getattr(section, "token", None) or getattr(section, "api_key", None)
            if secret is not None and secret.get_secret_value():
                values.append(secret.get_secret_value())
        app = self.github.app if self.github is not None else None
        if app is not None and app.private_key is not None and app.private_key.get_secret_value().strip():
            # The key inline (or from GITHUB_APP_PRIVATE_KEY): whole, and each of its lines,
            # in case an error or a model ever shows part of it.
            key = app.private_key.get_secret_value()
            values.append(key)
            lines = key.replace("\\n", "\n").splitlines()
            values += [line.strip() for line in lines if len(line.strip()) >= 32 and "-----" not in line]
        if self.chat.slack is not None:
            values += self.chat.slack.secrets()
        for hook_secret in (self.webhooks.github_secret, self.webhooks.gitlab_token, self.webhooks.gitlab_signing_token):
            if hook_secret is not None and hook_secret.get_secret_value():
                values.append(hook_secret.get_secret_value())
        return values

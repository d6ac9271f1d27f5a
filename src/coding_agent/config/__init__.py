"""The configuration file: pydantic models of the YAML, `${ENV}` substitution, env overrides.

Every model forbids unknown keys, so a typo is an error that names the key rather than a
setting silently ignored. `load_config` is the one entry point; it raises `ConfigError`
with a message that names each bad key and what is wrong with it.

A package since it outgrew one module: `base` (the strict base model), `forges`, `llm`,
`tools` (MCP servers), `service_sections`, `run_sections`, `model` (`AgentConfig`) and
`loading` (`load_config`). Everything is importable from `coding_agent.config`, as before.
"""

from __future__ import annotations

from coding_agent.config.forges import (
    GitHubAppConfig,
    GitHubConfig,
    GitLabConfig,
    LabelConfig,
)
from coding_agent.config.llm import (
    LLMConfig,
    LMStudioConfig,
    OllamaConfig,
    OpenAICompatibleConfig,
    ProviderName,
)
from coding_agent.config.loading import (
    DEFAULT_CONFIG_PATH,
    MAX_CONFIG_BYTES,
    MAX_CONFIG_VALUES,
    load_config,
    parse_config,
)
from coding_agent.config.model import (
    AgentConfig,
    SourceName,
)
from coding_agent.config.run_sections import (
    DEFAULT_COMPLETION_KEYWORDS,
    BudgetConfig,
    CiConfig,
    CommentDetectionConfig,
    CommentHandlingConfig,
    ContextStorageConfig,
    EgressConfig,
    LoopGuardConfig,
    MemoryConfig,
    PauseResumeConfig,
    PlanningConfig,
    PlanningReflectionConfig,
    PlanningRevisionConfig,
    PlanningVerificationConfig,
    ProgressCommentConfig,
    SecurityConfig,
    SetupConfig,
    SetupOverride,
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
    WORKSPACE_SYSTEM_PROMPT,
    BuiltinWorkspaceServerConfig,
    MCPServerConfig,
    ToolsConfig,
    WorkspaceServerConfig,
    builtin_workspace_server,
)

__all__ = [
    "AgentConfig",
    "GitHubAppConfig",
    "GitHubConfig",
    "GitLabConfig",
    "LabelConfig",
    "LLMConfig",
    "OpenAICompatibleConfig",
    "OllamaConfig",
    "BuiltinWorkspaceServerConfig",
    "MCPServerConfig",
    "WORKSPACE_SYSTEM_PROMPT",
    "WorkspaceServerConfig",
    "builtin_workspace_server",
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
    "DEFAULT_COMPLETION_KEYWORDS",
    "LMStudioConfig",
    "ProviderName",
    "WorkspaceConfig",
    "SchedulingConfig",
    "ContextStorageConfig",
    "CommentHandlingConfig",
    "MemoryConfig",
    "LoggingConfig",
    "DatabaseConfig",
    "QueueConfig",
    "WebhooksConfig",
    "BudgetConfig",
    "SecurityConfig",
    "RetryConfig",
    "LoopGuardConfig",
    "PlanningReflectionConfig",
    "PlanningRevisionConfig",
    "PlanningVerificationConfig",
    "PlanningConfig",
    "CiConfig",
    "DashboardConfig",
    "SourceName",
    "MAX_CONFIG_BYTES",
    "MAX_CONFIG_VALUES",
]

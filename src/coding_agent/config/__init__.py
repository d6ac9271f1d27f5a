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
    OpenAICompatibleConfig,
    OllamaConfig,
    LMStudioConfig,
    ProviderName,
)
from coding_agent.config.tools import (
    BuiltinWorkspaceServerConfig,
    MCPServerConfig,
    WORKSPACE_SYSTEM_PROMPT,
    WorkspaceServerConfig,
    builtin_workspace_server,
    ToolsConfig,
)
from coding_agent.config.service_sections import (
    SchedulingConfig,
    LoggingConfig,
    DatabaseConfig,
    QueueConfig,
    WebhooksConfig,
    RetryConfig,
    DashboardConfig,
)
from coding_agent.config.run_sections import (
    TaskStopConfig,
    CommentDetectionConfig,
    PauseResumeConfig,
    ProgressCommentConfig,
    EgressConfig,
    SetupConfig,
    SetupOverride,
    DEFAULT_COMPLETION_KEYWORDS,
    WorkspaceConfig,
    ContextStorageConfig,
    CommentHandlingConfig,
    MemoryConfig,
    BudgetConfig,
    SecurityConfig,
    LoopGuardConfig,
    PlanningReflectionConfig,
    PlanningRevisionConfig,
    PlanningVerificationConfig,
    PlanningConfig,
    CiConfig,
)
from coding_agent.config.model import (
    AgentConfig,
    SourceName,
)
from coding_agent.config.loading import (
    load_config,
    parse_config,
    DEFAULT_CONFIG_PATH,
    MAX_CONFIG_BYTES,
    MAX_CONFIG_VALUES,
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

"""Builds the configured task sources."""

from __future__ import annotations

from coding_agent.config import AgentConfig
from coding_agent.retry import RetryPolicy
from coding_agent.sources.base import Source

__all__ = ["create_sources", "retry_policy"]


def retry_policy(config: AgentConfig) -> RetryPolicy:
    settings = config.retry
    return RetryPolicy(
        retries=settings.retries, base_delay=settings.base_delay_seconds, max_delay=settings.max_delay_seconds
    )


def create_sources(config: AgentConfig) -> list[Source]:
    """One Source per entry of `task_source`, in the configured order."""
    policy = retry_policy(config)
    sources: list[Source] = []
    for name in config.sources:
        if name == "github":
            from coding_agent.sources.github import GitHubSource

            assert config.github is not None
            sources.append(GitHubSource(config.github, policy, timeout=config.retry.forge_timeout_seconds))
        else:
            from coding_agent.sources.gitlab import GitLabSource

            assert config.gitlab is not None
            sources.append(GitLabSource(config.gitlab, policy, timeout=config.retry.forge_timeout_seconds))
    return sources

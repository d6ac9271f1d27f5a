"""coding-agent: a self-hosted coding agent for GitHub and GitLab, steerable from the issue."""

__version__ = "0.1.0"

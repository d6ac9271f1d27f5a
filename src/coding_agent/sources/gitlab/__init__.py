"""The GitLab task source: `client` (the request path), `api` (the calls), `mapping` (to domain types)."""

from coding_agent.sources.gitlab.api import GitLabSource
from coding_agent.sources.gitlab.mapping import instance_url, permission_for_access_level

__all__ = ["GitLabSource", "instance_url", "permission_for_access_level"]

"""The GitHub task source: `client` (the request path), `api` (the calls), `mapping` (to domain types)."""

from coding_agent.sources.github.api import GitHubSource
from coding_agent.sources.github.client import GitHubNotFoundError
from coding_agent.sources.github.mapping import MAX_SEARCH_QUERY_LENGTH, build_search_query

__all__ = ["GitHubSource", "GitHubNotFoundError", "build_search_query", "MAX_SEARCH_QUERY_LENGTH"]

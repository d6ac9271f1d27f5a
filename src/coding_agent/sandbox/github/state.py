"""The in-memory world behind the GitHub testing server.

Tests seed it and inspect it directly from Python; the HTTP layer calls the very same
methods, so what a test sets up and what the agent does over HTTP meet in one place.
Every method takes one lock: the server runs in its own thread. The world is one object
composed of its parts, one module each on the shared tables of `tables.py`.
"""

from __future__ import annotations

from coding_agent.sandbox.github.apps import Apps
from coding_agent.sandbox.github.ci import Ci
from coding_agent.sandbox.github.comments import Comments
from coding_agent.sandbox.github.issues import Issues
from coding_agent.sandbox.github.tables import NotFoundError, ValidationFailed
from coding_agent.sandbox.github.traffic import Traffic

__all__ = ["GitHubState", "NotFoundError", "ValidationFailed"]


class GitHubState(Issues, Comments, Ci, Traffic, Apps):
    """Users, repositories, issues/PRs, labels, comments, events, CI, the request log and GitHub Apps."""

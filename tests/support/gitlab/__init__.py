"""A GitLab-compatible (API v4) testing server: stateful, in memory, python-gitlab-faithful.

`GitLabSandbox` runs it on a loopback port; `GitLabState` is the world tests seed and
inspect; `create_gitlab_app` gives the bare ASGI app for other hosts.
"""

from coding_agent.testing.gitlab.app import API_PREFIX, GitLabApp, create_gitlab_app
from coding_agent.testing.gitlab.models import (
    DEVELOPER,
    GUEST,
    MAINTAINER,
    OWNER,
    REPORTER,
    Discussion,
    Group,
    Item,
    Label,
    LabelEvent,
    Note,
    Project,
    RequestRecord,
    User,
)
from coding_agent.testing.gitlab.sandbox import GitLabSandbox
from coding_agent.testing.gitlab.state import GitLabState

__all__ = [
    "API_PREFIX",
    "GUEST",
    "REPORTER",
    "DEVELOPER",
    "MAINTAINER",
    "OWNER",
    "GitLabApp",
    "GitLabSandbox",
    "GitLabState",
    "create_gitlab_app",
    "Discussion",
    "Group",
    "Item",
    "Label",
    "LabelEvent",
    "Note",
    "Project",
    "RequestRecord",
    "User",
]

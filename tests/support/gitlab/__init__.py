"""A GitLab-compatible (API v4) testing server: stateful, in memory, python-gitlab-faithful.

`GitLabSandbox` runs it on a loopback port; `GitLabState` is the world tests seed and
inspect; `create_gitlab_app` gives the bare ASGI app for other hosts.
"""

from tests.support.gitlab.app import API_PREFIX, GitLabApp, create_gitlab_app
from tests.support.gitlab.hooks import HookDelivery
from tests.support.gitlab.models import (
    DEVELOPER,
    GUEST,
    MAINTAINER,
    OWNER,
    REPORTER,
    Discussion,
    Group,
    Item,
    Job,
    Label,
    LabelEvent,
    Note,
    Pipeline,
    Project,
    RequestRecord,
    User,
)
from tests.support.gitlab.sandbox import GitLabSandbox
from tests.support.gitlab.state import GitLabState

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
    "HookDelivery",
    "Item",
    "Job",
    "Label",
    "LabelEvent",
    "Note",
    "Pipeline",
    "Project",
    "RequestRecord",
    "User",
]

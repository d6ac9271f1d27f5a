"""A GitHub-compatible testing server: in-memory state, REST v3 endpoints, a live sandbox.

    with GitHubSandbox() as github:
        github.state.add_user("alice", token="t-alice")
        github.state.add_repo("alice/demo")
        number = github.state.create_issue("alice/demo", "Fix it", labels=["coding agent"])
        # point githubkit (or the GitHubSource) at github.url with token "t-alice"
"""

from coding_agent.sandbox.github.app import create_github_app
from coding_agent.sandbox.github.records import (
    PERMISSION_LEVELS,
    CommentRecord,
    EventRecord,
    IssueRecord,
    LabelRecord,
    RepoRecord,
    RequestRecord,
    ReviewCommentRecord,
    UserRecord,
)
from coding_agent.sandbox.github.sandbox import GitHubSandbox
from coding_agent.sandbox.github.state import GitHubState, NotFoundError, ValidationFailed

__all__ = [
    "GitHubState",
    "GitHubSandbox",
    "create_github_app",
    "NotFoundError",
    "ValidationFailed",
    "PERMISSION_LEVELS",
    "UserRecord",
    "RepoRecord",
    "LabelRecord",
    "IssueRecord",
    "CommentRecord",
    "ReviewCommentRecord",
    "EventRecord",
    "RequestRecord",
]

"""Who may clone and push the GitLab sandbox's projects, in GitLab's own terms.

Projects are private: reading the code needs Reporter (20) or above, pushing needs
Developer (30) or above, as on a GitLab instance without protected-branch rules.
"""

from __future__ import annotations

from coding_agent.sandbox.git_http import GitAccessDenied, GitHttpBackend
from tests.support.gitlab.models import DEVELOPER, REPORTER
from tests.support.gitlab.state import GitLabState

__all__ = ["gitlab_git_backend"]


def gitlab_git_backend(state: GitLabState) -> GitHttpBackend:
    """The smart-HTTP git server for `state`'s projects."""

    def authorize(name: str, token: str | None, push: bool) -> tuple[str, str]:
        user = state.user_by_token(token) if token else None
        if user is None:
            raise GitAccessDenied(401, "HTTP Basic: Access denied.")
        project = state.find_project(name)
        level = state.access_level(project.id, user.id) if project is not None else None
        if project is None or level is None or level < REPORTER:
            message = "The project you were looking for could not be found or you don't have permission to view it."
            raise GitAccessDenied(404, message, user.username)
        if push and level < DEVELOPER:
            raise GitAccessDenied(403, "You are not allowed to push code to this project.", user.username)
        return project.path_with_namespace, user.username

    return GitHttpBackend(
        state.git, authorize, default_branch=lambda name: state.require_project(name).default_branch
    )

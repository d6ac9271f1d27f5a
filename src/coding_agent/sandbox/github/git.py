"""Who may clone and push the GitHub sandbox's repositories, in GitHub's own terms.

Reading needs any role on the repository (a public one is readable by every token);
pushing needs `write` or above, as on github.com. Answers carry GitHub's wording.
"""

from __future__ import annotations

from coding_agent.sandbox.git_http import GitAccessDenied, GitHttpBackend
from coding_agent.sandbox.github.state import GitHubState, NotFoundError

__all__ = ["github_git_backend"]


def github_git_backend(state: GitHubState) -> GitHttpBackend:
    """The smart-HTTP git server for `state`'s repositories."""

    def authorize(name: str, token: str | None, push: bool) -> tuple[str, str]:
        login = state.login_for_token(token) if token else None
        if login is None:
            message = "Invalid username or token. Password authentication is not supported for Git operations."
            raise GitAccessDenied(401, message)
        try:
            record = state.repo(name)
        except NotFoundError:
            raise GitAccessDenied(404, "Repository not found.", login) from None
        if state.permission(record.full_name, login) is None or not state.token_allows_repo(token or "", record.full_name):
            raise GitAccessDenied(404, "Repository not found.", login)
        if push and not state.can(record.full_name, login, "write"):
            raise GitAccessDenied(403, f"Permission to {record.full_name}.git denied to {login}.", login)
        return record.full_name, login

    return GitHttpBackend(state.git, authorize, default_branch=lambda name: state.repo(name).default_branch)

"""Which repositories the agent works: the configured scope (`github.owner` / `repos`,
`gitlab.group` / `project_id`), checked for every queue message before its claim (a
GitHub App's source narrows it further to its installations' repositories:
`GitHubSource.refusal`).

A queue message is a hint, like a webhook (SPEC 15): anyone who can publish to the
broker can name any task key, and the forge token may reach far more repositories than
the ones configured. Discovery only ever finds tasks in scope; a message for any other
repository is dropped before a single forge request is made for it.

The check reads a key's segments as the forge would only because every `TaskKey` is
canonical (`domain.tasks.canonical_project`: no `.`/`..` segment, no escape): otherwise
`acme/../evil/x` would pass as `acme` here and reach `evil/x` through the forge's URLs.
"""

from __future__ import annotations

from coding_agent.config import AgentConfig
from coding_agent.domain.tasks import Task, TaskKey

__all__ = ["Scope"]


class Scope:
    def __init__(self, config: AgentConfig) -> None:
        self._github = config.github
        self._gitlab = config.gitlab

    def of_key(self, key: TaskKey) -> bool | None:
        """Whether the key's repository is in scope; None when only the forge can tell (a
        GitLab project configured by its numeric id: see `admits`)."""
        project = key.project.casefold()
        if key.forge == "github":
            github = self._github
            if github is None:
                return False
            if github.repos:  # discovery searches exactly these (owners of their own allowed)
                return project in {repo.casefold() for repo in github.full_repos()}
            if github.owner is None:  # a GitHub App's every installation: the source narrows it
                return True
            return project.partition("/")[0] == github.owner.casefold()
        gitlab = self._gitlab
        if gitlab is None:
            return False
        if gitlab.group is not None:  # the group's projects, and its subgroups'
            return project.startswith(f"{gitlab.group.casefold().strip('/')}/")
        wanted = str(gitlab.project_id)
        return project == wanted.casefold() if "/" in wanted else None

    def admits(self, task: Task) -> bool:
        """Whether `task`, as read from the forge, is in scope."""
        verdict = self.of_key(task.key)
        if verdict is not None:
            return verdict
        return self._gitlab is not None and task.extra.get("project_id") == str(self._gitlab.project_id)

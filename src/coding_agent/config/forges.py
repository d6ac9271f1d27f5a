"""The forge sections (`github`, `gitlab`) and the labels they share.
"""

from __future__ import annotations

from pydantic import Field, SecretStr, field_validator, model_validator

from coding_agent.config.base import _Strict

__all__ = ["LabelConfig", "GitHubAppConfig", "GitHubConfig", "GitLabConfig"]


class LabelConfig(_Strict):
    """Label names of the lifecycle (SPEC 3); each forge section carries its own."""

    bot_label: str = "coding agent"
    processing_label: str = "coding agent processing"
    done_label: str = "coding agent done"
    paused_label: str = "coding agent paused"
    stopped_label: str = "coding agent stopped"
    failed_label: str = "coding agent failed"
    stop_label: str = "coding agent stop"

    @field_validator(
        "bot_label", "processing_label", "done_label", "paused_label", "stopped_label", "failed_label", "stop_label"
    )
    @classmethod
    def _not_blank(cls, value: str) -> str:
        """An empty label matches nothing: the agent would never see a trigger."""
        if not value.strip():
            raise ValueError("must not be empty")
        return value

    @model_validator(mode="after")
    def _distinct(self) -> LabelConfig:
        """Two lifecycle states under one label could not be told apart."""
        seen: dict[str, str] = {}
        for key in LabelConfig.model_fields:
            value = getattr(self, key)
            other = seen.setdefault(value.strip().lower(), key)
            if other != key:
                raise ValueError(f"{key} and {other} must be different labels")
        return self


class GitHubAppConfig(_Strict):
    """A GitHub App instead of a token (SPEC 17): its id, its private key, optionally one installation.

    Without `installation_id` every installation of the app is worked (narrowed by
    `github.owner` / `github.repos` when set)."""

    app_id: int = Field(gt=0)
    private_key: SecretStr | None = None
    private_key_file: str | None = None
    installation_id: int | None = Field(default=None, gt=0)

    @model_validator(mode="after")
    def _one_key(self) -> GitHubAppConfig:
        """The key is given once: inline (or by GITHUB_APP_PRIVATE_KEY) or as a file."""
        inline = self.private_key is not None and bool(self.private_key.get_secret_value().strip())
        if inline == (self.private_key_file is not None and bool(self.private_key_file.strip())):
            raise ValueError("set exactly one of github.app.private_key and github.app.private_key_file")
        return self


class GitHubConfig(LabelConfig):
    api_url: str = "https://api.github.com"
    token: SecretStr | None = None
    app: GitHubAppConfig | None = None
    # Required with `token`; with `app`, it narrows the installations' repositories to one account's.
    owner: str | None = None
    repos: list[str] = Field(default_factory=list)
    query: str = ""
    assignee: str | None = None
    bot_name: str | None = None

    @model_validator(mode="after")
    def _one_credential(self) -> GitHubConfig:
        """A token and an app at once would leave it unclear whose rights a run has."""
        if self.app is not None and self.token is not None and self.token.get_secret_value():
            raise ValueError("set one of github.token and github.app, not both")
        if self.owner is not None and not self.owner.strip():
            raise ValueError("github.owner must not be empty")
        if self.owner is None and self.app is None:
            raise ValueError("set github.owner: with github.token the agent works one user's or organisation's repositories")
        bare = [repo for repo in self.repos if "/" not in repo]
        if self.owner is None and bare:
            raise ValueError(f"github.repos: {', '.join(bare)}: name each as owner/name when github.owner is not set")
        return self

    def full_repos(self) -> list[str]:
        """`repos` as `owner/name` (a bare name is one of `owner`'s)."""
        return [repo if "/" in repo else f"{self.owner}/{repo}" for repo in self.repos]

    def accounts(self) -> set[str] | None:
        """The accounts (casefolded) whose repositories are in scope; None: every account
        a GitHub App is installed on."""
        if self.repos:
            return {repo.split("/", 1)[0].casefold() for repo in self.full_repos()}
        return {self.owner.casefold()} if self.owner is not None else None


class GitLabConfig(LabelConfig):
    api_url: str = "https://gitlab.com"
    token: SecretStr | None = None
    group: str | None = None
    project_id: int | str | None = None
    assignee: str | None = None
    bot_name: str | None = None

    @model_validator(mode="after")
    def _one_scope(self) -> GitLabConfig:
        if self.group is None and self.project_id is None:
            raise ValueError("set gitlab.group or gitlab.project_id: the agent never searches a whole instance")
        return self

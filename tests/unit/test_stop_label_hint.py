"""The stop label (SPEC 17) as a GitHub webhook: the running run looks at its task now."""

from __future__ import annotations

import pytest
from pydantic import SecretStr

from coding_agent.config import GitHubConfig
from coding_agent.web.webhooks import Hint, github_hints

GITHUB = GitHubConfig(api_url="http://127.0.0.1:1", token=SecretStr("t"), owner="acme", bot_name="bot")


def _labeled(name: str, repo: str = "acme/widgets") -> dict[str, object]:
    return {"repository": {"full_name": repo}, "action": "labeled", "label": {"name": name}, "issue": {"number": 7}}


def test_the_stop_label_steers_the_running_run() -> None:
    assert github_hints(GITHUB, "issues", _labeled("coding agent stop")) == [Hint("github:acme/widgets#7", "steer")]


def test_other_labels_and_other_repositories_hint_nothing() -> None:
    assert github_hints(GITHUB, "issues", _labeled("bug")) == []
    assert github_hints(GITHUB, "issues", _labeled("coding agent stop", "other/widgets")) == []


def test_installation_events_change_an_apps_scope_only() -> None:
    app = GitHubConfig.model_validate({"api_url": "http://127.0.0.1:1", "owner": "acme", "app": {"app_id": 1, "private_key_file": "/k.pem"}})
    event = {"action": "added", "installation": {"id": 9, "account": {"login": "acme"}}, "repositories_added": []}
    assert github_hints(app, "installation_repositories", event) == [Hint("github:acme", "scope")]
    assert github_hints(app, "installation", {**event, "action": "suspend"}) == [Hint("github:acme", "scope")]
    elsewhere = {**event, "installation": {"id": 9, "account": {"login": "other"}}}
    assert github_hints(app, "installation_repositories", elsewhere) == []
    assert github_hints(GITHUB, "installation_repositories", event) == [], "a token setup has no installation"


def test_without_an_owner_every_installation_and_repository_of_the_app_is_heard() -> None:
    """`github.app` without `owner`/`repos`: every installation's account is in scope; the
    worker asks the source whether an installation holds a webhook's repository."""
    app = GitHubConfig.model_validate({"api_url": "http://127.0.0.1:1", "app": {"app_id": 1, "private_key_file": "/k.pem"}})
    event = {"action": "added", "installation": {"id": 9, "account": {"login": "globex"}}, "repositories_added": []}
    assert github_hints(app, "installation_repositories", event) == [Hint("github:globex", "scope")]
    assert github_hints(app, "installation", {**event, "action": "unsuspend"}) == [Hint("github:globex", "scope")]
    assert github_hints(app, "issues", _labeled("coding agent", "globex/tools")) == [Hint("github:globex/tools#7", "new")]
    narrowed = app.model_copy(update={"repos": ["acme/widgets"]})
    assert github_hints(narrowed, "installation_repositories", event) == []
    assert github_hints(narrowed, "issues", _labeled("coding agent", "globex/tools")) == []


@pytest.mark.parametrize(
    ("github", "problem"),
    [
        ({"token": "t"}, "set github.owner"),
        ({"app": {"app_id": 1, "private_key_file": "/k.pem"}, "repos": ["widgets"]}, "github.repos: widgets: name each as owner/name"),
        ({"app": {"app_id": 1, "private_key_file": "/k.pem"}, "owner": " "}, "github.owner must not be empty"),
    ],
)
def test_an_owner_is_optional_only_with_an_app(github: dict[str, object], problem: str) -> None:
    with pytest.raises(ValueError, match=problem):
        GitHubConfig.model_validate({"api_url": "http://127.0.0.1:1", **github})


def test_the_stop_label_on_gitlab_steers_the_running_run() -> None:
    from coding_agent.config import GitLabConfig
    from coding_agent.web.webhooks import gitlab_hints

    gitlab = GitLabConfig(api_url="http://127.0.0.1:1", token=SecretStr("t"), group="acme", bot_name="bot")
    project = {"id": 15, "path_with_namespace": "acme/widgets"}
    event = {
        "project": project,
        "object_attributes": {"iid": 23},
        "labels": [{"title": "coding agent processing"}, {"title": "coding agent stop"}],
        "changes": {"labels": {"previous": [{"title": "coding agent processing"}], "current": []}},
    }
    assert gitlab_hints(gitlab, "Issue Hook", event) == [Hint("gitlab:acme/widgets#23", "steer")]
    assert gitlab_hints(gitlab, "Issue Hook", {**event, "changes": {}}) == [], "no label change: nothing to steer"

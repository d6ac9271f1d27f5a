"""The configured scope a queue message's task key must be in (SPEC 15)."""

from __future__ import annotations

from datetime import datetime, timezone
from typing import Any

import pytest

from coding_agent.config import parse_config
from coding_agent.domain.tasks import Task, TaskKey
from coding_agent.runtime.scope import Scope

LLM = {"provider": "openai", "openai": {"model": "m", "base_url": "http://127.0.0.1:1/v1"}}


def _scope(**forges: dict[str, Any]) -> Scope:
    return Scope(parse_config({"task_source": list(forges), **forges, "llm": LLM}, env={"GITHUB_TOKEN": "t", "GITLAB_TOKEN": "t"}))


@pytest.mark.parametrize(
    ("github", "key", "verdict"),
    [
        ({"owner": "acme"}, "github:acme/widgets#1", True),
        ({"owner": "acme"}, "github:ACME/Widgets!2", True),
        ({"owner": "acme"}, "github:octo-other/gizmos#1", False),
        ({"owner": "acme"}, "github:acme-evil/widgets#1", False),
        ({"owner": "acme", "repos": ["widgets", "friends/tools"]}, "github:acme/widgets#1", True),
        ({"owner": "acme", "repos": ["widgets", "friends/tools"]}, "github:friends/tools#1", True),
        ({"owner": "acme", "repos": ["widgets", "friends/tools"]}, "github:acme/gadgets#1", False),
        ({"owner": "acme"}, "gitlab:acme/widgets#1", False),
    ],
)
def test_a_github_key_is_in_scope_as_discovery_searches(github: dict[str, Any], key: str, verdict: bool) -> None:
    assert _scope(github=github).of_key(TaskKey.parse(key)) is verdict


def _task(key: str, project_id: str) -> Task:
    now = datetime.now(timezone.utc)
    return Task(TaskKey.parse(key), "t", "", "alice", (), (), "", now, now, extra={"project_id": project_id})


def test_a_gitlab_key_is_in_the_group_or_the_project() -> None:
    group = _scope(gitlab={"group": "acme"})
    assert group.of_key(TaskKey.parse("gitlab:acme/sub/widgets!3")) is True
    assert group.of_key(TaskKey.parse("gitlab:acme-evil/widgets!3")) is False
    by_path = _scope(gitlab={"project_id": "acme/widgets"})
    assert by_path.of_key(TaskKey.parse("gitlab:acme/widgets#3")) is True
    assert by_path.of_key(TaskKey.parse("gitlab:acme/widgets2#3")) is False
    by_id = _scope(gitlab={"project_id": 42})
    key = "gitlab:acme/widgets#3"
    assert by_id.of_key(TaskKey.parse(key)) is None, "only the forge knows the project's id"
    assert by_id.admits(_task(key, "42")) and not by_id.admits(_task(key, "43"))

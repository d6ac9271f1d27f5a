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


APP = {"app": {"app_id": 1, "private_key_file": "/k.pem"}}


@pytest.mark.parametrize(
    ("github", "key", "verdict"),
    [
        (APP, "github:acme/widgets#1", True),  # every installation's: the source narrows it
        (APP, "github:globex/tools#1", True),
        ({**APP, "owner": "acme"}, "github:globex/tools#1", False),
        ({**APP, "repos": ["globex/tools"]}, "github:globex/tools#1", True),
        ({**APP, "repos": ["globex/tools"]}, "github:acme/widgets#1", False),
    ],
)
def test_an_apps_scope_without_an_owner_is_its_installations(github: dict[str, Any], key: str, verdict: bool) -> None:
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


# A key that could pass the scope check as one repository and reach another through the
# forge's URLs (SPEC 15): refused by the one parser every route uses, naming the key.
NOT_CANONICAL = [
    "github:acme/../evil/x#4",
    "github:acme/..#4",
    "github:acme/.#4",
    "github:../evil#4",
    "github:acme/evil/x#4",
    "github:acme%2F..%2Fevil/x#4",
    "github:acme/x%2F..#4",
    "github:acme/x%00#4",
    "github:acme/x?y=1#4",
    "github:acme/x\\..\\evil#4",
    "github:acme.evil/x#4",
    "github:аcme/x#4",  # a Cyrillic а
    "github:acme//x#4",
    "github:acme/x/#4",
    "gitlab:acme/../evil/x!3",
    "gitlab:acme/sub/../../evil/x#3",
    "gitlab:acme/./x#3",
    "gitlab:acme/x%2Fy#3",
    "gitlab:acme/x;y#3",
    "github:acme/x#٣",  # an Arabic-Indic digit
]


@pytest.mark.parametrize("text", NOT_CANONICAL)
def test_a_key_with_a_dot_segment_or_an_escape_is_no_task_key(text: str) -> None:
    with pytest.raises(ValueError, match="not a (canonical )?task key") as refused:
        TaskKey.parse(text)
    assert repr(text) in str(refused.value), "the refusal names the key"


@pytest.mark.parametrize(
    "text",
    [
        "github:acme/widgets#1",
        "github:Acme-Corp/my.repo_2!7",
        "github:acme/.github#3",
        "github:acme_emu/x#3",
        "gitlab:acme/sub/deeper/pro_ject-1.2!3",
        "gitlab:acme/.hidden#1",
    ],
)
def test_the_forges_own_names_are_task_keys(text: str) -> None:
    assert str(TaskKey.parse(text)) == text


def test_a_key_built_from_its_parts_is_held_to_the_same_rule() -> None:
    """The poll and the webhooks build keys from a forge's fields, not from text."""
    from coding_agent.domain.tasks import TaskKind

    with pytest.raises(ValueError, match="'acme/../evil/x'"):
        TaskKey("github", "acme/../evil/x", TaskKind.ISSUE, 4)
    with pytest.raises(ValueError, match="'acme/sub/../evil'"):
        TaskKey("gitlab", "acme/sub/../evil", TaskKind.CHANGE, 4)

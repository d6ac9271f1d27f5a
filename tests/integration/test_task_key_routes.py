"""A task key that is not canonical (SPEC 15), by the routes other than the queue (its
end-to-end test is `tests/e2e/test_security_task_keys.py`): `acme/../evil/x` passes a
scope check that reads its first segment, and the forge's URLs resolve it to `evil/x`.

A verified webhook naming such a repository is refused before any hint, with one log line
naming it, on both forges (the same delivery with the canonical name is still enqueued);
the dashboard's API and the CLI refuse such a key with an error naming it."""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any
from urllib.parse import quote

import httpx
import pytest
import typer

from coding_agent.cli.common import task_key
from coding_agent.store.state import StateStore
from coding_agent.web.server import serving_dashboard
from tests.integration.test_operator_dashboard import KEY, make_config, seed

from tests.integration.test_runtime_webhooks import (
    _PROJECT,
    GITLAB_TOKEN,
    REPO,
    SECRET,
    RecordingSink,
    _config,
    _gitlab_headers,
    _gitlab_issue_hook,
    _gitlab_note_hook,
    _post,
    github,  # noqa: F401 - the fixture
    sink,  # noqa: F401 - the fixture
)

HOSTILE = ["acme/../evil/x", "acme/..%2Fevil/x", "acme/%2e%2e/evil/x", "acme/./x"]


def _refusals(caplog: pytest.LogCaptureFixture, name: str) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING and repr(name) in r.getMessage()]


@pytest.mark.parametrize("full_name", HOSTILE)
async def test_a_github_event_for_a_dot_segment_repository_enqueues_nothing(
    sink: RecordingSink, github: Any, caplog: pytest.LogCaptureFixture, full_name: str  # noqa: F811
) -> None:
    _, hooks, number = github
    payload = hooks.issues(REPO, number, "labeled", "alice", label="coding agent")
    payload["repository"] = {**payload["repository"], "full_name": full_name}
    hostile = hooks.body(payload)
    fair = hooks.body(hooks.issues(REPO, number, "labeled", "alice", label="coding agent"))
    with caplog.at_level(logging.INFO):
        refused = await _post(_config(), sink, "/webhooks/github", hostile, hooks.headers("issues", hostile, SECRET))
        accepted = await _post(_config(), sink, "/webhooks/github", fair, hooks.headers("issues", fair, SECRET))
    assert (refused.status_code, accepted.status_code) == (200, 202)
    assert sink.accepted == [("new", f"github:{REPO}#{number}")], "the in-scope delivery only"
    assert len(_refusals(caplog, full_name)) == 1, caplog.text


@pytest.mark.parametrize("path", ["acme/../evil/x", "acme/sub/../../evil/x", "acme/x%2F..%2F..%2Fevil"])
async def test_a_gitlab_event_for_a_dot_segment_project_enqueues_nothing(
    sink: RecordingSink, caplog: pytest.LogCaptureFixture, path: str  # noqa: F811
) -> None:
    issue = _gitlab_issue_hook(["coding agent"])
    issue["project"] = {**_PROJECT, "path_with_namespace": path}
    note = _gitlab_note_hook()
    note["project"] = issue["project"]
    fair = json.dumps(_gitlab_issue_hook(["coding agent"])).encode()
    with caplog.at_level(logging.INFO):
        answers = [
            await _post(_config(), sink, "/webhooks/gitlab", json.dumps(issue).encode(), _gitlab_headers("Issue Hook")),
            await _post(_config(), sink, "/webhooks/gitlab", json.dumps(note).encode(), _gitlab_headers("Note Hook")),
            await _post(_config(), sink, "/webhooks/gitlab", fair, _gitlab_headers("Issue Hook")),
        ]
    assert [answer.status_code for answer in answers] == [200, 200, 202]
    assert sink.accepted == [("new", "gitlab:acme/widgets#23")]
    assert len(_refusals(caplog, path)) == 2, "one line for each refused delivery"
    assert GITLAB_TOKEN not in caplog.text


DASHBOARD_HOSTILE = ["github:acme/../evil/x#4", "github:acme/%2e%2e/evil#4", "gitlab:acme/sub/../../evil/x!4"]


async def test_the_dashboard_api_refuses_a_key_that_is_not_canonical(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    config, hidden = make_config(tmp_path)
    store = StateStore(config.database.url)
    seed(store, hidden[0])
    try:
        async with serving_dashboard(config, store) as url:
            assert url is not None
            async with httpx.AsyncClient(base_url=url) as client:
                with caplog.at_level(logging.INFO):
                    answers = [
                        await client.post(f"/api/tasks/{quote(key, safe='')}/stop", json={}) for key in DASHBOARD_HOSTILE
                    ] + [await client.get(f"/api/tasks/{quote(key, safe='')}") for key in DASHBOARD_HOSTILE]
                fair = await client.post(f"/api/tasks/{quote(KEY, safe='')}/pause", json={})
    finally:
        store.close()
    assert [answer.status_code for answer in answers] == [400] * 6
    for answer, key in zip(answers, DASHBOARD_HOSTILE * 2):
        assert repr(key) in answer.json()["error"], answer.json()
    assert len(_refusals(caplog, "github:acme/../evil/x#4")) == 2, "one line per refused request"
    assert fair.status_code == 200


def test_the_cli_refuses_a_key_that_is_not_canonical(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(typer.Exit) as refused:
        task_key("github:acme/../evil/x#4")
    assert refused.value.exit_code == 2
    assert "'github:acme/../evil/x#4'" in capsys.readouterr().err
    assert task_key("github:acme/widgets#4") == "github:acme/widgets#4"

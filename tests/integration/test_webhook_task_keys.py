"""A verified webhook naming a repository that is not canonical (SPEC 15): `acme/../evil/x`
passes a scope check that reads its first segment, and the forge's URLs resolve it to
`evil/x`. Refused before any hint, with one log line naming it, on both forges; the same
delivery with the canonical name is still enqueued."""

from __future__ import annotations

import json
import logging
from typing import Any

import pytest

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

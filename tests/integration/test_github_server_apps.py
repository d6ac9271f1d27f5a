"""The GitHub testing server as a GitHub App sees it (SPEC 17), over real HTTP: the JWT is
checked against the app's public key, installation tokens are narrowed as asked, expire
as configured, and act as `<slug>[bot]` in the repositories they were given only."""

from __future__ import annotations

import base64
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from coding_agent.sandbox.github import GitHubSandbox
from tests.support.github_app import AppKey, app_jwt, new_app_key
from tests.support.waiting import wait_for

REPO = "acme/widgets"
OTHER = "acme/gadgets"
OUTSIDE = "acme/private-stuff"


@pytest.fixture(scope="module")
def key() -> AppKey:
    return new_app_key()


@pytest.fixture
def sandbox(key: AppKey) -> Iterator[GitHubSandbox]:
    with GitHubSandbox() as box:
        state = box.state
        state.add_user("alice", token="t-alice")
        for name in (REPO, OTHER):
            state.add_repo(name, private=True)
        state.add_repo(OUTSIDE, private=True)
        yield box


def _client(sandbox: GitHubSandbox, token: str) -> httpx.Client:
    return httpx.Client(base_url=sandbox.url, headers={"Authorization": f"Bearer {token}"})


def _mint(sandbox: GitHubSandbox, app_id: int, private_pem: str, installation: int, **body: object) -> httpx.Response:
    with _client(sandbox, app_jwt(app_id, private_pem)) as http:
        return http.post(f"/app/installations/{installation}/access_tokens", json=body)


def test_app_and_installations_answer_to_the_apps_jwt(sandbox: GitHubSandbox, key: AppKey) -> None:
    app = sandbox.state.add_app("acme-agent", key.public_pem)
    installation = sandbox.state.install_app(app.id, "acme", [REPO, OTHER])
    with _client(sandbox, app_jwt(app.id, key.private_pem)) as http:
        about = http.get("/app").json()
        installations = http.get("/app/installations").json()
    assert about["slug"] == "acme-agent" and about["id"] == app.id
    assert [(i["id"], i["account"]["login"], i["suspended_at"]) for i in installations] == [(installation.id, "acme", None)]


def test_a_jwt_signed_with_another_key_or_naming_another_app_is_refused(sandbox: GitHubSandbox, key: AppKey) -> None:
    app = sandbox.state.add_app("acme-agent", key.public_pem)
    sandbox.state.install_app(app.id, "acme", [REPO])
    stranger = new_app_key()
    for token in (
        app_jwt(app.id, stranger.private_pem),  # a bad key
        app_jwt(app.id + 999, key.private_pem),  # a wrong app id
        app_jwt(app.id, key.private_pem, lifetime=3600),  # exp too far ahead
        app_jwt(app.id, key.private_pem, issued=time.time() - 3600),  # long expired
        "not-a-jwt",
    ):
        with _client(sandbox, token) as http:
            answer = http.get("/app/installations")
        assert answer.status_code == 401, token
        assert answer.json()["message"]
    # an installation token is no JWT either
    assert _client(sandbox, "ghs_nothing").get("/app").status_code == 401


def test_tokens_narrowed_to_a_repository_reach_it_only_and_act_as_the_bot(sandbox: GitHubSandbox, key: AppKey) -> None:
    state = sandbox.state
    app = state.add_app("acme-agent", key.public_pem)
    installation = state.install_app(app.id, "acme", [REPO, OTHER])
    number = state.create_issue(REPO, "Fix it", "body", "alice")
    answer = _mint(sandbox, app.id, key.private_pem, installation.id, repositories=["widgets"], permissions={"issues": "write"})
    assert answer.status_code == 201, answer.text
    minted = answer.json()
    assert [r["full_name"] for r in minted["repositories"]] == [REPO]
    assert minted["permissions"] == {"issues": "write"}
    with _client(sandbox, minted["token"]) as http:
        comment = http.post(f"/repos/{REPO}/issues/{number}/comments", json={"body": "on it"})
        assert comment.status_code == 201
        assert comment.json()["user"]["login"] == "acme-agent[bot]"
        assert comment.json()["user"]["type"] == "Bot"
        assert http.get(f"/repos/{OTHER}").status_code == 404  # installed, but not in this token
        assert http.get(f"/repos/{OUTSIDE}").status_code == 404  # not installed at all
        listed = http.get("/installation/repositories").json()
        assert [r["full_name"] for r in listed["repositories"]] == [REPO]
    whole = _mint(sandbox, app.id, key.private_pem, installation.id).json()
    with _client(sandbox, whole["token"]) as http:
        assert http.get(f"/repos/{OTHER}").status_code == 200
        assert http.get(f"/repos/{OUTSIDE}").status_code == 404
    assert [(m.repositories, m.status) for m in state.mints()] == [(("widgets",), 201), (None, 201)]


def test_minting_refuses_what_the_installation_was_not_given(sandbox: GitHubSandbox, key: AppKey) -> None:
    state = sandbox.state
    app = state.add_app("acme-agent", key.public_pem)
    installation = state.install_app(app.id, "acme", [REPO])
    assert _mint(sandbox, app.id, key.private_pem, installation.id, repositories=["private-stuff"]).status_code == 422
    assert _mint(sandbox, app.id, key.private_pem, installation.id, permissions={"administration": "write"}).status_code == 422
    assert _mint(sandbox, app.id, key.private_pem, installation.id + 999).status_code == 404
    state.suspend_installation(installation.id)
    suspended = _mint(sandbox, app.id, key.private_pem, installation.id)
    assert suspended.status_code == 403 and "suspended" in suspended.json()["message"]


def test_an_expired_token_is_refused_over_the_api_and_git(sandbox: GitHubSandbox, key: AppKey, tmp_path: Path) -> None:
    state = sandbox.state
    app = state.add_app("acme-agent", key.public_pem, token_lifetime=1.0)
    installation = state.install_app(app.id, "acme", [REPO])
    minted = _mint(sandbox, app.id, key.private_pem, installation.id).json()
    token = minted["token"]
    clone_url = f"{sandbox.url}/{REPO}.git"
    basic = base64.b64encode(f"x-access-token:{token}".encode()).decode()
    git = ["git", "-c", f"http.extraHeader=Authorization: Basic {basic}"]
    with _client(sandbox, token) as http:
        assert http.get(f"/repos/{REPO}").status_code == 200
        subprocess.run([*git, "ls-remote", clone_url], check=True, capture_output=True)
        wait_for(lambda: http.get(f"/repos/{REPO}").status_code == 401, 10, "the token to expire")
    refused = subprocess.run([*git, "ls-remote", clone_url], capture_output=True, text=True)
    assert refused.returncode != 0
    assert state.expired_token_uses()[token] >= 2

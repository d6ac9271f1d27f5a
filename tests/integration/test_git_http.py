"""The sandbox forges' git content: real `git clone` and `git push` over smart HTTP.

Each test drives the real git client against `git http-backend` behind the sandbox
GitHub or GitLab, with the forge's token as the credential, and checks what the forge's
own permissions and test controls (`refuse_pushes`, `race_next_push`) make of it.
"""

from __future__ import annotations

import base64
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from coding_agent.sandbox.faults import Fault
from coding_agent.sandbox.git_http import git_client, token_from_authorization
from coding_agent.sandbox.github import GitHubSandbox
from tests.support.gitlab import DEVELOPER, REPORTER, GitLabSandbox

REPO = "acme/widgets"
WRITER_TOKEN = "t-writer-0123456789"
READER_TOKEN = "t-reader-0123456789"


@pytest.fixture
def github() -> Iterator[GitHubSandbox]:
    with GitHubSandbox() as sandbox:
        state = sandbox.state
        state.add_user("writer", token=WRITER_TOKEN)
        state.add_user("reader", token=READER_TOKEN)
        state.add_repo(REPO, private=True)
        state.set_permission(REPO, "writer", "write")
        state.set_permission(REPO, "reader", "read")
        yield sandbox


@pytest.fixture
def gitlab() -> Iterator[GitLabSandbox]:
    with GitLabSandbox() as sandbox:
        state = sandbox.state
        state.add_user("writer", token=WRITER_TOKEN)
        state.add_user("reader", token=READER_TOKEN)
        state.add_project(REPO)
        state.set_access(REPO, "writer", DEVELOPER)
        state.set_access(REPO, "reader", REPORTER)
        yield sandbox


def _clone_url(sandbox: GitHubSandbox) -> str:
    with httpx.Client(base_url=sandbox.url, headers={"Authorization": f"token {WRITER_TOKEN}"}) as client:
        return str(client.get(f"/repos/{REPO}").json()["clone_url"])


def test_token_header_forms() -> None:
    basic = base64.b64encode(b"oauth2:glpat-abc").decode()
    assert token_from_authorization(f"Basic {basic}") == "glpat-abc"
    assert token_from_authorization("Bearer ghp_xyz") == "ghp_xyz"
    assert token_from_authorization("token ghp_xyz") == "ghp_xyz"
    assert token_from_authorization("Basic !!notbase64") is None
    assert token_from_authorization("") is None


def test_github_clone_url_serves_the_seeded_files(github: GitHubSandbox, tmp_path: Path) -> None:
    sha = github.state.init_repo(REPO, files={"README.md": "# widgets\n", "src/app.py": "print('hi')\n"})
    url = _clone_url(github)
    assert url == f"{github.url}/{REPO}.git"

    git_client(tmp_path, "clone", "--depth", "1", url, "copy", token=READER_TOKEN)

    copy = tmp_path / "copy"
    assert (copy / "src" / "app.py").read_text() == "print('hi')\n"
    assert git_client(copy, "rev-parse", "HEAD").stdout.strip() == sha
    assert github.state.branches(REPO) == {"main": sha}


def test_a_repository_nobody_seeded_is_cloned_with_a_readme(github: GitHubSandbox, tmp_path: Path) -> None:
    git_client(tmp_path, "clone", _clone_url(github), "copy", token=WRITER_TOKEN)
    assert (tmp_path / "copy" / "README.md").read_text() == "# widgets\n"


def test_clone_needs_a_known_token_with_access(github: GitHubSandbox, tmp_path: Path) -> None:
    url = _clone_url(github)
    github.state.add_user("stranger", token="t-stranger")

    anonymous = git_client(tmp_path, "clone", url, "a", check=False)
    wrong = git_client(tmp_path, "clone", url, "b", token="t-nobody", check=False)
    stranger = git_client(tmp_path, "clone", url, "c", token="t-stranger", check=False)

    assert anonymous.returncode != 0 and wrong.returncode != 0
    assert stranger.returncode != 0 and "not found" in stranger.stderr.lower()
    statuses = [(r.user, r.status) for r in github.state.git.requests]
    assert (None, 401) in statuses and ("stranger", 404) in statuses


def test_push_needs_write_access(github: GitHubSandbox, tmp_path: Path) -> None:
    url = _clone_url(github)
    git_client(tmp_path, "clone", url, "copy", token=READER_TOKEN)
    copy = tmp_path / "copy"
    (copy / "new.txt").write_text("new\n")
    git_client(copy, "add", "new.txt")
    git_client(copy, "commit", "-m", "Add new.txt")

    refused = git_client(copy, "push", url, "HEAD:refs/heads/topic", token=READER_TOKEN, check=False)
    assert refused.returncode != 0 and "403" in refused.stderr
    assert "topic" not in github.state.branches(REPO)

    git_client(copy, "push", url, "HEAD:refs/heads/topic", token=WRITER_TOKEN)
    assert github.state.git.read_file(REPO, "topic", "new.txt") == b"new\n"
    assert github.state.git.log(REPO, "topic")[0] == "Add new.txt"


def test_refuse_pushes_and_faults_answer_beforegit_client(github: GitHubSandbox, tmp_path: Path) -> None:
    url = _clone_url(github)
    git_client(tmp_path, "clone", url, "copy", token=WRITER_TOKEN)
    copy = tmp_path / "copy"
    git_client(copy, "commit", "--allow-empty", "-m", "empty")

    github.state.git.refuse_pushes = True
    refused = git_client(copy, "push", url, "HEAD:refs/heads/main", token=WRITER_TOKEN, check=False)
    github.state.git.refuse_pushes = False
    github.faults.add(Fault(pattern=r"git-receive-pack", status=503, count=1))
    unavailable = git_client(copy, "push", url, "HEAD:refs/heads/main", token=WRITER_TOKEN, check=False)

    assert "403" in refused.stderr and "503" in unavailable.stderr
    assert git_client(copy, "push", url, "HEAD:refs/heads/main", token=WRITER_TOKEN).returncode == 0


def test_race_next_push_makes_a_non_fast_forward(github: GitHubSandbox, tmp_path: Path) -> None:
    url = _clone_url(github)
    git_client(tmp_path, "clone", url, "copy", token=WRITER_TOKEN)
    copy = tmp_path / "copy"
    git_client(copy, "commit", "--allow-empty", "-m", "mine")
    github.state.git.race_next_push(REPO, "main")

    rejected = git_client(copy, "push", url, "HEAD:refs/heads/main", token=WRITER_TOKEN, check=False)

    assert rejected.returncode != 0 and "rejected" in rejected.stderr
    assert (github.state.git.read_file(REPO, "main", "RACE.md") or b"").startswith(b"pushed by someone else")


def test_github_pull_creation_checks_the_branches(github: GitHubSandbox) -> None:
    headers = {"Authorization": f"token {WRITER_TOKEN}"}
    body = {"title": "T", "head": "topic", "base": "main", "draft": True}
    with httpx.Client(base_url=github.url, headers=headers) as client:
        missing = client.post(f"/repos/{REPO}/pulls", json=body)
        github.state.create_branch(REPO, "topic")
        created = client.post(f"/repos/{REPO}/pulls", json=body)
    assert missing.status_code == 422 and "topic" in missing.json()["errors"][0]["message"]
    assert created.status_code == 201 and created.json()["head"]["ref"] == "topic"


def test_gitlab_project_is_cloned_and_pushed_with_a_token(gitlab: GitLabSandbox, tmp_path: Path) -> None:
    with httpx.Client(base_url=gitlab.api_url, headers={"PRIVATE-TOKEN": WRITER_TOKEN}) as client:
        url = client.get(f"/projects/{REPO.replace('/', '%2F')}").json()["http_url_to_repo"]
    assert url == f"{gitlab.url}/{REPO}.git"
    gitlab.state.init_repo(REPO, files={"app.py": "x = 1\n"})

    git_client(tmp_path, "clone", url, "copy", token=READER_TOKEN)
    copy = tmp_path / "copy"
    (copy / "app.py").write_text("x = 2\n")
    git_client(copy, "commit", "-am", "Change x")
    reader_push = git_client(copy, "push", url, "HEAD:refs/heads/fix", token=READER_TOKEN, check=False)
    git_client(copy, "push", url, "HEAD:refs/heads/fix", token=WRITER_TOKEN)

    assert reader_push.returncode != 0 and "403" in reader_push.stderr
    assert gitlab.state.git.read_file(REPO, "fix", "app.py") == b"x = 2\n"


def test_gitlab_merge_request_needs_its_source_branch(gitlab: GitLabSandbox) -> None:
    fields = {"source_branch": "fix", "target_branch": "main", "title": "Draft: Fix"}
    with httpx.Client(base_url=gitlab.api_url, headers={"PRIVATE-TOKEN": WRITER_TOKEN}) as client:
        missing = client.post(f"/projects/{REPO.replace('/', '%2F')}/merge_requests", json=fields)
        gitlab.state.create_branch(REPO, "fix")
        created = client.post(f"/projects/{REPO.replace('/', '%2F')}/merge_requests", json=fields)
    assert missing.status_code == 400 and "fix" in str(missing.json())
    assert created.status_code == 201 and created.json()["draft"] is True


def test_seeded_pull_and_merge_requests_get_their_branches(github: GitHubSandbox, gitlab: GitLabSandbox) -> None:
    github.state.create_pull(REPO, "PR", head="feature")
    gitlab.state.create_merge_request(REPO, "MR", source_branch="feature")
    assert set(github.state.branches(REPO)) == {"main", "feature"}
    assert set(gitlab.state.branches(REPO)) == {"main", "feature"}

"""Issue 49 / SPEC 17: the agent installed as a GitHub App, end to end on the sandbox forge.

`coding-agent run --once` as a user runs it, configured with `github.app` (an app id and a
private key, no token). The sandbox checks the app's RS256 JWTs against its public key,
mints installation tokens that expire as configured (seconds here), refuses them with 401
afterwards and counts every request sent with an expired one.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from coding_agent.sandbox.github import GitHubSandbox
from coding_agent.sandbox.replay_model import ReplaySandbox
from coding_agent.sources.writes import strip_marker
from tests.support.github_app import AppKey, new_app_key

from .conftest import HELLO_SCRIPT, LLM_API_KEY, MAINTAINER, REPO, AgentSetup, llm_section, write_config

SLUG = "acme-agent"
BOT = f"{SLUG}[bot]"
INSTALLED_ELSEWHERE = "acme/gadgets"  # installed, but no task in it: never touched
NOT_INSTALLED = "acme/private-stuff"
# A second account with the app installed on one of its two repositories.
OTHER_ACCOUNT = "globex"
OTHER_REPO = "globex/tools"
OTHER_NOT_INSTALLED = "globex/secret"


class AppForge:
    """The sandbox GitHub with the app installed on `acme` (two repositories of three)."""

    name = "github"

    def __init__(self, sandbox: GitHubSandbox, key: AppKey, token_lifetime: float) -> None:
        self.sandbox = sandbox
        self.url = sandbox.url
        self.key = key
        state = sandbox.state
        state.add_user(MAINTAINER)
        for name in (REPO, INSTALLED_ELSEWHERE, NOT_INSTALLED):
            state.add_repo(name, private=True)
            state.set_permission(name, MAINTAINER, "admin")
        state.create_issue(NOT_INSTALLED, "Not ours", "An app not installed here never sees it.", author=MAINTAINER)
        state.add_label(NOT_INSTALLED, 1, "coding agent", actor=MAINTAINER)
        self.app = state.add_app(SLUG, key.public_pem, owner="acme", token_lifetime=token_lifetime)
        self.installation = state.install_app(self.app.id, "acme", [REPO, INSTALLED_ELSEWHERE])

    def config_section(self, app_id: int | None = None, owner: bool = True) -> dict[str, Any]:
        section = {"api_url": self.url, "app": {"app_id": app_id or self.app.id, "private_key": "${E2E_APP_KEY}"}}
        return {**section, "owner": "acme"} if owner else section

    def install_on_other_account(self, suspended: bool = False) -> Any:
        """The app installed on `globex` too (on `tools`, not on `secret`, whose labelled
        issue it must never touch)."""
        state = self.sandbox.state
        for name in (OTHER_REPO, OTHER_NOT_INSTALLED):
            state.add_repo(name, private=True)
            state.set_permission(name, MAINTAINER, "admin")
        self.open_issue("Not ours either", "Not installed here.", OTHER_NOT_INSTALLED)
        return state.install_app(self.app.id, OTHER_ACCOUNT, [OTHER_REPO], suspended=suspended)

    def open_issue(self, title: str, body: str, repo: str = REPO) -> int:
        number = self.sandbox.state.create_issue(repo, title, body, author=MAINTAINER)
        self.sandbox.state.add_label(repo, number, "coding agent", actor=MAINTAINER)
        return number


@pytest.fixture(scope="module")
def key() -> AppKey:
    return new_app_key()


def _forge(key: AppKey, token_lifetime: float) -> Iterator[AppForge]:
    with GitHubSandbox() as sandbox:
        yield AppForge(sandbox, key, token_lifetime)


@pytest.fixture
def forge(key: AppKey) -> Iterator[AppForge]:
    yield from _forge(key, 3600)


@pytest.fixture
def short_lived(key: AppKey) -> Iterator[AppForge]:
    yield from _forge(key, 3.0)


def _run_once(
    setup: AgentSetup, private_key: str, timeout: float = 180, command: tuple[str, ...] = ("run", "--once")
) -> subprocess.CompletedProcess[str]:
    """`coding-agent run --once` (or `command`) with the app's key in the environment, no token anywhere."""
    env = {**os.environ, "E2E_APP_KEY": private_key, "E2E_LLM_KEY": LLM_API_KEY}
    for name in ("GITHUB_TOKEN", "GITLAB_TOKEN", "OPENAI_API_KEY", "GITHUB_BOT_NAME", "GITHUB_APP_PRIVATE_KEY"):
        env.pop(name, None)
    return subprocess.run(
        [sys.executable, "-m", "coding_agent.cli", *command, "--config", str(setup.config_path)],
        cwd=setup.directory,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def _setup(
    tmp_path: Path, forge: AppForge, model: ReplaySandbox, app_id: int | None = None, owner: bool = True
) -> AgentSetup:
    directory = tmp_path / "agent"
    directory.mkdir()
    github = forge.config_section(app_id, owner)
    setup = write_config(directory, [], llm_section(model), task_source=["github"], github=github)
    return setup


def _agent_files(setup: AgentSetup) -> dict[str, bytes]:
    """Every file the agent wrote: logs, the store, contexts, workspaces (all under its directory)."""
    return {str(p): p.read_bytes() for p in setup.directory.rglob("*") if p.is_file() and p.name != "config.yaml"}


def _api_requests(forge: AppForge) -> list[Any]:
    return [r for r in forge.sandbox.state.requests() if not (r.path == "/app" or r.path.startswith("/app/"))]


def test_an_issue_is_worked_to_a_draft_pr_with_installation_tokens_as_the_apps_bot(
    forge: AppForge, key: AppKey, tmp_path: Path
) -> None:
    number = forge.open_issue("Add a greeting file", "Please add hello.txt with a greeting.")
    with ReplaySandbox(HELLO_SCRIPT) as model:
        setup = _setup(tmp_path, forge, model)
        result = _run_once(setup, key.private_pem)
    assert result.returncode == 0, result.stderr
    state = forge.sandbox.state
    assert "coding agent done" in state.issue(REPO, number).labels
    [pull] = state.pulls(REPO)
    assert pull.author == BOT and pull.draft, "the draft PR is the app's bot's"
    comments = state.comments(REPO, number)
    assert comments and {c.author for c in comments} == {BOT}, "every comment is by <slug>[bot]"
    assert any(strip_marker(c.body).startswith("Wrote hello.txt") for c in comments)

    requests = _api_requests(forge)
    assert requests and {r.login for r in requests} == {BOT}, "every forge request carried an installation token"
    assert not any(INSTALLED_ELSEWHERE in r.path or NOT_INSTALLED in r.path for r in requests)
    narrowed = [m.repositories for m in state.mints() if m.repositories is not None]
    assert narrowed and set(narrowed) == {("widgets",)}, "each repository token names the task's repository only"
    assert all(m.status == 201 for m in state.mints())
    # Tokens are cached until near expiry: the preflight's look at the installation's
    # repositories, one for the search, one for the poll's looks at the task before its
    # claim, and the run's own (its API calls and its git fetches and push share it).
    assert [m.repositories for m in state.mints()] == [None, None, ("widgets",), ("widgets",)], state.mints()
    run_token = state.mints()[-1]
    assert run_token.permissions is not None and run_token.permissions["contents"] == "write"
    assert set(run_token.permissions) == {"contents", "issues", "pull_requests", "checks", "statuses", "actions", "metadata"}

    secrets = [key.private_pem.splitlines()[1], *(t.token for t in state.app_tokens())]
    for where, data in {**_agent_files(setup), "output": (result.stdout + result.stderr).encode()}.items():
        for secret in secrets:
            assert secret.encode() not in data, f"a secret leaked into {where}"


LONG_SCRIPT: dict[str, Any] = {
    "latency_seconds": 1.2,
    "replies": [
        {"tool": "workspace/create", "args": {"path": "a.txt", "content": "a\n"}, "comment": "Step one."},
        {"tool": "workspace/create", "args": {"path": "b.txt", "content": "b\n"}, "comment": "Step two."},
        {"tool": "workspace/create", "args": {"path": "c.txt", "content": "c\n"}, "comment": "Step three."},
        {"tool": "workspace/create", "args": {"path": "d.txt", "content": "d\n"}, "comment": "Step four."},
        {"tool": "workspace/create", "args": {"path": "e.txt", "content": "e\n"}, "comment": "Step five."},
        {"done": "Wrote five files."},
    ],
}


def test_a_run_outliving_two_token_lifetimes_renews_them_and_pushes(short_lived: AppForge, key: AppKey, tmp_path: Path) -> None:
    forge = short_lived
    number = forge.open_issue("Five files", "Please add five files.")
    with ReplaySandbox(LONG_SCRIPT) as model:
        setup = _setup(tmp_path, forge, model)
        result = _run_once(setup, key.private_pem)
    assert result.returncode == 0, result.stderr
    state = forge.sandbox.state
    assert "coding agent done" in state.issue(REPO, number).labels, result.stderr[-3000:]
    [pull] = state.pulls(REPO)
    branch = pull.head
    shown = subprocess.run(
        ["git", "--git-dir", str(state.git_dir(REPO)), "show", f"{branch}:e.txt"], capture_output=True, text=True
    )
    assert shown.stdout == "e\n", "the push at the end of the run went through with a renewed token"
    repo_mints = [m for m in state.mints() if m.repositories == ("widgets",)]
    assert len(repo_mints) >= 3, "the repository's token was renewed at least twice during the run"
    assert all(m.status == 201 for m in state.mints())
    assert all(count <= 1 for count in state.expired_token_uses().values()), "no expired token was sent twice"


@pytest.mark.parametrize("problem", ["bad key", "wrong app id"])
def test_a_bad_key_or_wrong_app_id_is_a_clear_error_and_claims_nothing(
    forge: AppForge, key: AppKey, tmp_path: Path, problem: str
) -> None:
    number = forge.open_issue("Add a greeting file", "Please add hello.txt.")
    with ReplaySandbox(HELLO_SCRIPT) as model:
        if problem == "bad key":
            setup = _setup(tmp_path, forge, model)
            result = _run_once(setup, "-----BEGIN RSA PRIVATE KEY-----\nnot a key\n-----END RSA PRIVATE KEY-----\n")
            expected = "github.app.private_key"
        else:
            setup = _setup(tmp_path, forge, model, app_id=forge.app.id + 1000)
            result = _run_once(setup, key.private_pem)
            expected = "github.app.app_id"
        assert not model.requests, "no run started"
    output = result.stdout + result.stderr
    assert expected in output, output[-3000:]
    labels = forge.sandbox.state.issue(REPO, number).labels
    assert "coding agent processing" not in labels and "coding agent" in labels, "nothing was claimed"
    assert not forge.sandbox.state.comments(REPO, number)
    assert key.private_pem.splitlines()[1] not in output


def test_doctor_names_the_app_its_bot_installation_and_repositories_in_scope(
    forge: AppForge, key: AppKey, tmp_path: Path
) -> None:
    with ReplaySandbox(HELLO_SCRIPT) as model:
        setup = _setup(tmp_path, forge, model)
        result = _run_once(setup, key.private_pem, command=("doctor",))
    [line] = [line for line in result.stdout.splitlines() if "forge github" in line]
    assert line.startswith("ok"), result.stdout
    assert f"GitHub App {forge.app.id} (bot @{BOT})" in line
    assert f"installation {forge.installation.id}: {REPO}, {INSTALLED_ELSEWHERE} in scope" in line
    assert NOT_INSTALLED not in line


def test_doctor_fails_on_a_permission_the_installation_lacks(key: AppKey, tmp_path: Path) -> None:
    with GitHubSandbox() as sandbox:
        forge = AppForge(sandbox, key, 3600)
        lacking = sandbox.state.add_app("thin-agent", key.public_pem, owner="acme", permissions={"issues": "write", "metadata": "read"})
        sandbox.state.install_app(lacking.id, "acme", [REPO])
        with ReplaySandbox(HELLO_SCRIPT) as model:
            setup = _setup(tmp_path, forge, model, app_id=lacking.id)
            result = _run_once(setup, key.private_pem, command=("doctor",))
    [line] = [line for line in result.stdout.splitlines() if "forge github" in line]
    assert line.startswith("FAIL"), result.stdout
    assert "lacks permissions contents: write" in line and "pull_requests: write" in line


@pytest.mark.parametrize("account", ["acme", OTHER_ACCOUNT])
def test_an_installation_repositories_webhook_starts_the_added_repositorys_task_at_once(
    forge: AppForge, key: AppKey, tmp_path: Path, account: str
) -> None:
    """The app is installed on one more repository while `serve` runs (its poll interval an
    hour): GitHub's `installation_repositories` delivery makes it look now, without a restart.
    On `globex`: the second installation of an app configured without `github.owner`."""
    import asyncio

    import httpx

    from coding_agent.config import load_config
    from coding_agent.runtime.service import AgentService
    from coding_agent.web.server import bind_socket, serving_http
    from tests.support.github_webhooks import GitHubWebhooks
    from tests.support.waiting import wait_for, wait_until

    secret = "whsec-" + LLM_API_KEY[:12]
    state = forge.sandbox.state
    if account == "acme":
        installation, added, held = forge.installation, NOT_INSTALLED, [REPO, INSTALLED_ELSEWHERE]
        number = forge.open_issue("Add a greeting file", "Please add hello.txt.", NOT_INSTALLED)
    else:
        installation, added, held = forge.install_on_other_account(), OTHER_NOT_INSTALLED, [OTHER_REPO]
        number = 1  # its labelled issue
    with ReplaySandbox(HELLO_SCRIPT) as model:
        directory = tmp_path / "agent"
        directory.mkdir()
        setup = write_config(
            directory, [], llm_section(model), task_source=["github"], github=forge.config_section(owner=account == "acme"),
            scheduling={"interval_seconds": 3600}, webhooks={"github_secret": secret},
        )
        config = load_config(setup.config_path, env={**os.environ, "E2E_APP_KEY": key.private_pem, "E2E_LLM_KEY": LLM_API_KEY})

        def install_and_deliver(service: AgentService, url: str) -> None:
            wait_for(lambda: service.producer.cycles >= 1, 60, "the first poll at start")
            assert not model.requests, "the repository is not installed yet: nothing started"
            assert not any(added in r.path for r in state.requests()), "never touched before it is installed"
            state.set_installation_repos(installation.id, [*held, added])
            payload = {
                "action": "added",
                "installation": {"id": installation.id, "account": {"login": account}},
                "repository_selection": "selected",
                "repositories_added": [{"full_name": added, "name": added.split("/")[1]}],
                "repositories_removed": [],
                "sender": {"login": MAINTAINER},
            }
            body = GitHubWebhooks.body(payload)
            headers = GitHubWebhooks.headers("installation_repositories", body, secret)
            answer = httpx.post(f"{url}/webhooks/github", content=body, headers=headers)
            assert answer.status_code == 202, answer.text

        async def serve() -> None:
            service = AgentService(config)
            stop = asyncio.Event()
            try:
                async with serving_http(config, service, bind_socket("127.0.0.1", 0)) as url:
                    assert url is not None
                    serving = asyncio.create_task(service.serve(stop))
                    try:
                        await asyncio.to_thread(install_and_deliver, service, url)
                        done = lambda: "coding agent done" in state.issue(added, number).labels  # noqa: E731
                        await wait_until(lambda: done() or serving.done(), 120, "the added repository's task done")
                    finally:
                        stop.set()
                        await serving
            finally:
                await service.aclose()

        asyncio.run(asyncio.wait_for(serve(), 200))
    assert "coding agent done" in state.issue(added, number).labels
    narrowed = [m for m in state.mints() if m.repositories == (added.split("/")[1],)]
    assert narrowed and {m.installation_id for m in narrowed} == {installation.id}


def _untouched(forge: AppForge, repo: str, number: int) -> None:
    state = forge.sandbox.state
    labels = state.issue(repo, number).labels
    assert "coding agent" in labels and "coding agent processing" not in labels, f"{repo}#{number} was claimed"
    assert not state.comments(repo, number), f"{repo}#{number} was commented on"
    assert not state.pulls(repo)
    assert not any(repo in r.path for r in forge.sandbox.state.requests()), f"a request named {repo}"


def test_without_an_owner_every_installation_is_worked_each_task_with_its_installations_token(
    forge: AppForge, key: AppKey, tmp_path: Path
) -> None:
    """SPEC 17 scope: `github.app` and no `github.owner`: the labelled issues of both accounts'
    installations are worked, each run's token minted by the installation holding its
    repository and naming that repository only; a repository in no installation (on either
    account) is never touched."""
    other = forge.install_on_other_account()
    ours = forge.open_issue("Add a greeting file", "Please add hello.txt with a greeting.")
    theirs = forge.open_issue("Add a greeting file", "Please add hello.txt with a greeting.", OTHER_REPO)
    with ReplaySandbox(HELLO_SCRIPT) as model:
        setup = _setup(tmp_path, forge, model, owner=False)
        result = _run_once(setup, key.private_pem)
    assert result.returncode == 0, result.stderr
    state = forge.sandbox.state
    for repo, number in ((REPO, ours), (OTHER_REPO, theirs)):
        assert "coding agent done" in state.issue(repo, number).labels, (repo, result.stderr[-3000:])
        [pull] = state.pulls(repo)
        assert pull.author == BOT
    narrowed = {(m.installation_id, m.repositories) for m in state.mints() if m.repositories is not None}
    assert narrowed == {(forge.installation.id, ("widgets",)), (other.id, ("tools",))}, state.mints()
    assert all(m.status == 201 for m in state.mints())
    assert {r.login for r in _api_requests(forge)} == {BOT}
    _untouched(forge, NOT_INSTALLED, 1)
    _untouched(forge, OTHER_NOT_INSTALLED, 1)
    assert not any(INSTALLED_ELSEWHERE in r.path for r in state.requests())


def test_a_suspended_installations_labelled_issue_is_not_started_with_one_log_line(
    forge: AppForge, key: AppKey, tmp_path: Path
) -> None:
    suspended = forge.install_on_other_account(suspended=True)
    ours = forge.open_issue("Add a greeting file", "Please add hello.txt with a greeting.")
    theirs = forge.open_issue("Add a greeting file", "Please add hello.txt.", OTHER_REPO)
    with ReplaySandbox(HELLO_SCRIPT) as model:
        setup = _setup(tmp_path, forge, model, owner=False)
        result = _run_once(setup, key.private_pem)
    assert result.returncode == 0, result.stderr
    state = forge.sandbox.state
    assert "coding agent done" in state.issue(REPO, ours).labels, "the other installation is worked"
    _untouched(forge, OTHER_REPO, theirs)
    assert not [m for m in state.mints() if m.installation_id == suspended.id], "no token asked of it"
    line = f"installation {suspended.id} on {OTHER_ACCOUNT} is suspended: its tasks are not started"
    logged = "".join(p.read_text() for p in (setup.directory / "logs").rglob("*") if p.is_file())
    assert logged.count(line) == 1, logged[-3000:]


def test_doctor_without_an_owner_names_each_installation_and_its_repositories(
    forge: AppForge, key: AppKey, tmp_path: Path
) -> None:
    other = forge.install_on_other_account()
    with ReplaySandbox(HELLO_SCRIPT) as model:
        setup = _setup(tmp_path, forge, model, owner=False)
        result = _run_once(setup, key.private_pem, command=("doctor",))
    [line] = [line for line in result.stdout.splitlines() if "forge github" in line]
    assert line.startswith("ok"), result.stdout
    assert f"installation {forge.installation.id}: {REPO}, {INSTALLED_ELSEWHERE} in scope" in line
    assert f"installation {other.id}: {OTHER_REPO} in scope" in line
    assert NOT_INSTALLED not in line and OTHER_NOT_INSTALLED not in line

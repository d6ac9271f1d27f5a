"""GitHubSource as a GitHub App (SPEC 17) against the sandbox GitHub over real HTTP: tokens
are cached until near expiry (no mint per poll or per call), each repository's calls and
git credential carry a token narrowed to it, and a token the forge refuses is replaced
once, never sent again."""

from __future__ import annotations

import base64
from collections.abc import AsyncIterator, Iterator

import pytest

from coding_agent.config import GitHubConfig
from coding_agent.domain.tasks import TaskKey, TaskKind
from coding_agent.errors import ConfigError, ForgeError
from coding_agent.retry import RetryPolicy
from coding_agent.sandbox.github import GitHubSandbox
from coding_agent.sources.github import GitHubSource
from tests.support.github_app import AppKey, new_app_key

REPO = "acme/widgets"
OTHER = "acme/gadgets"
SLUG = "acme-agent"
PUBLIC_NOT_INSTALLED = "acme/public-site"


@pytest.fixture(scope="module")
def key() -> AppKey:
    return new_app_key()


@pytest.fixture
def sandbox(key: AppKey) -> Iterator[GitHubSandbox]:
    with GitHubSandbox() as box:
        state = box.state
        state.add_user("alice")
        for name in (REPO, OTHER):
            state.add_repo(name, private=True)
            state.set_permission(name, "alice", "admin")
        app = state.add_app(SLUG, key.public_pem, owner="acme")
        state.install_app(app.id, "acme", [REPO, OTHER])
        state.add_repo(PUBLIC_NOT_INSTALLED)  # public: the search finds its issues
        stray = state.create_issue(PUBLIC_NOT_INSTALLED, "Not ours", "body", author="alice")
        state.add_label(PUBLIC_NOT_INSTALLED, stray, "coding agent", actor="alice")
        number = state.create_issue(REPO, "Fix it", "body", author="alice")
        state.add_label(REPO, number, "coding agent", actor="alice")
        yield box


def _config(sandbox: GitHubSandbox, key: AppKey, **changes: object) -> GitHubConfig:
    [app] = sandbox.state.apps()
    settings = {"app_id": app.id, "private_key": key.private_pem, **changes}
    return GitHubConfig.model_validate({"api_url": sandbox.url, "owner": "acme", "app": settings})


@pytest.fixture
async def source(sandbox: GitHubSandbox, key: AppKey) -> AsyncIterator[GitHubSource]:
    github = GitHubSource(_config(sandbox, key), RetryPolicy(retries=0))
    yield github
    await github.aclose()


ISSUE = TaskKey("github", REPO, TaskKind.ISSUE, 1)


async def test_polls_and_calls_reuse_the_cached_tokens(sandbox: GitHubSandbox, source: GitHubSource) -> None:
    for _ in range(3):  # three polls
        [task] = await source.discover()  # not the public repository's: the app is not installed there
        assert task.key.project == REPO
        await source.get_task(task.key)
        await source.list_comments(task.key)
    assert source.bot_name == f"{SLUG}[bot]"
    mints = sandbox.state.mints()
    assert [m.repositories for m in mints] == [None, ("widgets",)], "one token for the search, one for the repository"
    assert {r.login for r in sandbox.state.requests() if not r.path.startswith("/app")} == {f"{SLUG}[bot]"}


async def test_the_git_credential_is_the_repositorys_narrowed_token(sandbox: GitHubSandbox, source: GitHubSource) -> None:
    header = await source.git_http_auth_for(REPO)
    assert header is not None and header.startswith("Authorization: Basic ")
    user, _, token = base64.b64decode(header.split()[-1]).decode().partition(":")
    assert user == "x-access-token"
    minted = sandbox.state.app_token(token)
    assert minted is not None and minted.repos == (REPO,)
    assert source.git_http_auth() is None, "no long-lived credential exists to hand out"


async def test_a_refused_token_is_replaced_once_and_never_sent_again(sandbox: GitHubSandbox, source: GitHubSource) -> None:
    await source.get_task(ISSUE)
    sandbox.state.expire_app_tokens()  # revoked, or lapsed while the process slept
    await source.get_task(ISSUE)
    await source.list_comments(ISSUE)
    uses = sandbox.state.expired_token_uses()
    assert list(uses.values()) == [1], "the refused token was sent once, then replaced"
    assert len([m for m in sandbox.state.mints() if m.repositories == ("widgets",)]) == 2


async def test_a_suspended_installation_is_left_out_with_one_log_line(
    sandbox: GitHubSandbox, source: GitHubSource, caplog: pytest.LogCaptureFixture
) -> None:
    [app] = sandbox.state.apps()
    [installation] = sandbox.state.installations(app.id)
    sandbox.state.suspend_installation(installation.id)
    for _ in range(3):  # three polls
        assert await source.discover() == []
    said = [r.getMessage() for r in caplog.records if "suspended" in r.getMessage()]
    assert said == [f"github app {app.id}: installation {installation.id} on acme is suspended: its tasks are not started"]
    assert await source.refusal(REPO) == f"installation {installation.id} on acme is suspended"
    assert not [m for m in sandbox.state.mints() if m.installation_id == installation.id], "no token asked of it"
    sandbox.state.suspend_installation(installation.id, False)
    source.scope_changed()  # the `installation` webhook's `unsuspend`
    assert [t.key.project for t in await source.discover()] == [REPO]


async def test_a_wrong_app_id_names_the_key(sandbox: GitHubSandbox, key: AppKey) -> None:
    config = _config(sandbox, key)
    assert config.app is not None
    wrong = config.model_copy(update={"app": config.app.model_copy(update={"app_id": config.app.app_id + 99})})
    github = GitHubSource(wrong, RetryPolicy(retries=0))
    try:
        with pytest.raises(ForgeError, match=r"github\.app\.app_id") as raised:
            await github.discover()
        assert key.private_pem.splitlines()[1] not in str(raised.value)
    finally:
        await github.aclose()


def test_a_key_that_is_no_key_names_the_config_key(sandbox: GitHubSandbox, key: AppKey) -> None:
    with pytest.raises(ConfigError, match=r"github\.app\.private_key: not an RSA private key"):
        GitHubSource(_config(sandbox, key, private_key="-----BEGIN RSA PRIVATE KEY-----\nAAAA\n-----END RSA PRIVATE KEY-----"), RetryPolicy())


async def test_a_repository_added_to_the_installation_is_in_scope_at_the_next_poll(
    sandbox: GitHubSandbox, source: GitHubSource
) -> None:
    assert [t.key.project for t in await source.discover()] == [REPO]
    [app] = sandbox.state.apps()
    [installation] = sandbox.state.installations(app.id)
    sandbox.state.set_installation_repos(installation.id, [REPO, OTHER, PUBLIC_NOT_INSTALLED])
    assert sorted(t.key.project for t in await source.discover()) == [PUBLIC_NOT_INSTALLED, REPO]


def test_an_apps_bot_is_mentioned_by_its_slug() -> None:
    from coding_agent.runtime.followups import mentions

    assert mentions("@acme-agent please also fix the docs", "acme-agent[bot]")
    assert mentions("thanks @acme-agent[bot]!", "acme-agent[bot]")
    assert not mentions("@acme-agent-two do it", "acme-agent[bot]")
    assert not mentions("mail me at x@acme-agent", "acme-agent[bot]")


async def test_a_done_issue_mentioning_the_apps_slug_is_a_followup(sandbox: GitHubSandbox, source: GitHubSource) -> None:
    from datetime import datetime, timedelta, timezone

    state = sandbox.state
    number = state.create_issue(REPO, "Done before", "body", author="alice")
    state.add_label(REPO, number, "coding agent done", actor="alice")
    state.add_comment(REPO, number, "alice", "@acme-agent please also update the changelog")
    await source.learn_identity()
    since = datetime.now(timezone.utc) - timedelta(hours=1)
    found = [task.key.number async for page in source.discover_followups(since) for task in page]
    assert found == [number]


@pytest.mark.parametrize("change", ["suspend", "uninstall"])
async def test_a_suspended_or_removed_installation_ends_work_with_a_clear_reason(
    sandbox: GitHubSandbox, source: GitHubSource, change: str
) -> None:
    await source.get_task(ISSUE)  # a run under way, its token cached
    [app] = sandbox.state.apps()
    [installation] = sandbox.state.installations(app.id)
    if change == "suspend":
        sandbox.state.suspend_installation(installation.id)
    else:
        sandbox.state.uninstall(installation.id)
    expected = "is suspended" if change == "suspend" else "was removed"
    with pytest.raises(ForgeError, match=expected):
        await source.list_comments(ISSUE)
    assert await source.discover() == []  # the next poll starts nothing (a suspended one is logged)
    assert await source.refusal(REPO) is not None, "nor does a queue message or webhook for it"


async def test_a_repository_outside_the_installation_is_read_with_the_installations_token(
    sandbox: GitHubSandbox, source: GitHubSource
) -> None:
    """A PR from a contributor's public fork: the fork is in no installation, so git reads
    it with the installation's own token (no mint can name it), never with more."""
    sandbox.state.add_repo("stranger/widgets")  # public
    for project in ("stranger/widgets", PUBLIC_NOT_INSTALLED):
        header = await source.git_http_auth_for(project)
        assert header is not None
        token = base64.b64decode(header.split()[-1]).decode().partition(":")[2]
        minted = sandbox.state.app_token(token)
        assert minted is not None and minted.repos is None, "the installation's token"
    assert all(m.status == 201 for m in sandbox.state.mints() if m.repositories != ("public-site",))


async def test_each_run_gets_its_own_token_narrowed_to_its_repository_and_needs(
    sandbox: GitHubSandbox, source: GitHubSource
) -> None:
    seen = []
    for _ in range(2):  # two runs of tasks in the same repository, one after the other
        async with source.session():
            await source.get_task(ISSUE)
            await source.list_comments(ISSUE)
            header = await source.git_http_auth_for(REPO)
            assert header is not None
            seen.append(base64.b64decode(header.split()[-1]).decode().partition(":")[2])
    assert seen[0] != seen[1], "a run's token is its own (and a resumed run gets a fresh one)"
    runs = [m for m in sandbox.state.mints() if m.repositories is not None]
    assert len(runs) == 2, "one mint per run, its API calls and git sharing it"
    expected = {"contents": "write", "issues": "write", "pull_requests": "write", "checks": "read",
                "statuses": "read", "actions": "read", "metadata": "read"}
    assert all(m.repositories == ("widgets",) and m.permissions == expected for m in runs)


@pytest.mark.parametrize("skew", [-3600, 3600], ids=["clock-behind", "clock-ahead"])
async def test_a_skewed_clock_is_a_clear_error_naming_the_clock(sandbox: GitHubSandbox, key: AppKey, skew: int) -> None:
    """This machine's clock an hour off: GitHub refuses the JWT; the error says to check the clock."""
    import time

    from coding_agent.sources.github.app_auth import AppTokens

    config = _config(sandbox, key)
    assert config.app is not None
    tokens = AppTokens(config.app, sandbox.url, "acme", timeout=10, clock=lambda: time.time() + skew)
    try:
        with pytest.raises(ForgeError, match="refused the app's JWT.*clock") as raised:
            await tokens.token(None)
        assert "claim" in str(raised.value), "GitHub's own words on what was wrong"
    finally:
        await tokens.aclose()
    assert not sandbox.state.mints(), "nothing minted, nothing claimed"


async def test_two_installations_the_other_accounts_repositories_are_never_worked(
    sandbox: GitHubSandbox, source: GitHubSource
) -> None:
    state = sandbox.state
    state.add_user("bob")
    state.add_repo("globex/tools", private=True)
    state.set_permission("globex/tools", "bob", "admin")
    [app] = state.apps()
    other = state.install_app(app.id, "globex", ["globex/tools"])
    number = state.create_issue("globex/tools", "Theirs", "body", author="bob")
    state.add_label("globex/tools", number, "coding agent", actor="bob")
    for _ in range(2):
        assert [t.key.project for t in await source.discover()] == [REPO], "github.owner narrows the scope"
    assert not any("globex" in r.path for r in state.requests())
    assert all(m.installation_id != other.id for m in state.mints()), "no token of the other installation"

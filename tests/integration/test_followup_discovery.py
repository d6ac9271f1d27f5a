"""Follow-up discovery over real HTTP: GitHub's one search, GitLab's two listings (SPEC 3)."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from datetime import datetime, timedelta, timezone
from pathlib import Path

import httpx

from coding_agent.config import GitHubConfig, GitLabConfig
from coding_agent.domain.tasks import Comment
from coding_agent.redaction import Redactor
from coding_agent.retry import RetryPolicy
from coding_agent.runtime.followups import FollowUpIntake, find_followup_comment, mentions
from coding_agent.sandbox.github import GitHubSandbox, GitHubState
from coding_agent.sources.base import Source
from coding_agent.sources.github import GitHubSource
from coding_agent.sources.gitlab import GitLabSource
from coding_agent.sources.http import CachingTransport
from coding_agent.store.state import StateStore
from tests.support.gitlab import GitLabSandbox

TOKEN = "ghp_" + "FollowupDiscoveryToken0123456789"
DONE = "coding agent done"
T0 = datetime(2026, 3, 1, tzinfo=timezone.utc)


def test_mentions_are_whole() -> None:
    assert mentions("@agent-bot please", "agent-bot") and mentions("cc @Agent-Bot.", "agent-bot")
    assert not mentions("@agent-bot-two", "agent-bot") and not mentions("me@agent-bot.dev", "agent-bot")


def test_the_trigger_is_the_newest_mention_after_the_bots_last_comment() -> None:
    def at(minutes: int, author: str, body: str) -> Comment:
        return Comment(str(minutes), author, body, T0 + timedelta(minutes=minutes))

    old_mention, bot, plain, new_mention = at(1, "alice", "@bot go"), at(2, "bot", "Done."), at(3, "alice", "hm"), at(4, "bob", "@bot more")
    assert find_followup_comment([old_mention, bot], "bot") is None, "answered already"
    assert find_followup_comment([old_mention, bot, plain, new_mention], "bot") == new_mention
    assert find_followup_comment([old_mention, bot, plain], "bot") is None


def test_github_search_finds_done_items_mentioning_the_bot_since_a_time() -> None:
    with GitHubSandbox() as sandbox:
        state = sandbox.state
        state.add_user("alice")
        state.add_user("agent-bot", token=TOKEN, bot=True)
        state.add_repo("acme/widgets")
        state.set_permission("acme/widgets", "agent-bot", "write")
        mentioned = state.create_issue("acme/widgets", "Mentioned", "x", author="alice")
        silent = state.create_issue("acme/widgets", "Silent", "x", author="alice")
        for number in (mentioned, silent):
            state.add_label("acme/widgets", number, DONE, actor="alice")
        state.add_comment("acme/widgets", mentioned, "alice", "@agent-bot one more thing")
        state.add_comment("acme/widgets", silent, "alice", "no mention here")

        async def discover(since: datetime) -> list[int]:
            config = GitHubConfig(api_url=sandbox.url, token=TOKEN, owner="acme", bot_name="agent-bot")
            source = GitHubSource(config, RetryPolicy(retries=0))
            try:
                return [task.key.number async for page in source.discover_followups(since) for task in page]
            finally:
                await source.aclose()

        before = len(state.requests())
        assert asyncio.run(discover(datetime.now(timezone.utc) - timedelta(days=7))) == [mentioned]
        assert len(state.requests()) - before == 1, "one search per poll"
        assert asyncio.run(discover(datetime.now(timezone.utc) + timedelta(days=1))) == []


def test_gitlab_lists_done_items_updated_since_a_time() -> None:
    with GitLabSandbox() as sandbox:
        state = sandbox.state
        state.add_user("alice")
        state.add_user("agent-bot", token="glpat-" + "FollowupDiscovery01", bot=True)
        state.add_group("acme")
        state.add_project("acme/widgets")
        state.set_access("acme/widgets", "agent-bot", 30)
        done = state.create_issue("acme/widgets", "Done one", "x", author="alice")
        state.add_label("acme/widgets", done, DONE, actor="alice")
        other = state.create_issue("acme/widgets", "Still open", "x", author="alice")
        state.add_label("acme/widgets", other, "coding agent", actor="alice")

        async def discover(since: datetime) -> list[int]:
            config = GitLabConfig(api_url=sandbox.url, token="glpat-" + "FollowupDiscovery01", group="acme", bot_name="agent-bot")
            source = GitLabSource(config, RetryPolicy(retries=0))
            try:
                return [task.key.number async for page in source.discover_followups(since) for task in page]
            finally:
                await source.aclose()

        assert asyncio.run(discover(datetime.now(timezone.utc) - timedelta(days=7))) == [done]
        assert asyncio.run(discover(datetime.now(timezone.utc) + timedelta(days=1))) == []


# -- review threads on the PR/MR the agent opened ---------------------------------------


def test_github_review_candidates_are_the_bots_open_pulls_in_one_search() -> None:
    with GitHubSandbox() as sandbox:
        state = sandbox.state
        state.add_user("alice")
        state.add_user("agent-bot", token=TOKEN, bot=True)
        state.add_repo("acme/widgets")
        state.set_permission("acme/widgets", "agent-bot", "write")
        ours = state.create_pull("acme/widgets", "Greet", author="agent-bot", head="coding-agent/1-greet")
        state.create_pull("acme/widgets", "Other", author="alice", head="feature")

        async def discover(since: datetime) -> list[int]:
            config = GitHubConfig(api_url=sandbox.url, token=TOKEN, owner="acme", bot_name="agent-bot")
            source = GitHubSource(config, RetryPolicy(retries=0))
            try:
                return [task.key.number async for page in source.discover_review_followups(since) for task in page]
            finally:
                await source.aclose()

        before = len(state.requests())
        assert asyncio.run(discover(datetime.now(timezone.utc) - timedelta(days=7))) == [ours]
        assert len(state.requests()) - before == 1, "one search per poll"
        assert asyncio.run(discover(datetime.now(timezone.utc) + timedelta(days=1))) == []


def test_gitlab_review_candidates_are_the_bots_open_merge_requests_in_one_listing() -> None:
    with GitLabSandbox() as sandbox:
        state = sandbox.state
        token = "glpat-" + "FollowupDiscovery02"
        state.add_user("alice")
        state.add_user("agent-bot", token=token, bot=True)
        state.add_group("acme")
        state.add_project("acme/widgets")
        state.set_access("acme/widgets", "agent-bot", 30)
        ours = state.create_merge_request("acme/widgets", "Greet", author="agent-bot", source_branch="coding-agent/1-greet")
        state.create_merge_request("acme/widgets", "Other", author="alice", source_branch="feature")

        async def discover(since: datetime) -> list[tuple[int, str | None]]:
            config = GitLabConfig(api_url=sandbox.url, token=token, group="acme", bot_name="agent-bot")
            source = GitLabSource(config, RetryPolicy(retries=0))
            try:
                return [(task.key.number, task.head_branch) async for page in source.discover_review_followups(since) for task in page]
            finally:
                await source.aclose()

        before = len(state.requests())
        assert asyncio.run(discover(datetime.now(timezone.utc) - timedelta(days=7))) == [(ours, "coding-agent/1-greet")]
        assert len(state.requests()) - before == 1, "one listing per poll"
        assert asyncio.run(discover(datetime.now(timezone.utc) + timedelta(days=1))) == []


def test_the_bots_open_pulls_come_a_page_at_a_time_the_next_asked_for_when_this_one_is_taken() -> None:
    """A poll holds one page of candidates, not all of a busy bot's open PRs at once."""
    with GitHubSandbox() as sandbox:
        state = sandbox.state
        state.add_user("agent-bot", token=TOKEN, bot=True)
        state.add_repo("acme/widgets")
        for number in range(150):
            state.create_pull("acme/widgets", f"Change {number}", author="agent-bot", head=f"coding-agent/{number}-x")

        def searches() -> int:
            return sum(request.path == "/search/issues" for request in state.requests())

        config = GitHubConfig(api_url=sandbox.url, token=TOKEN, owner="acme", bot_name="agent-bot")
        pages = asyncio.run(_pages_and_requests(lambda: GitHubSource(config, RetryPolicy(retries=0)), searches))
        assert pages == [(100, 1), (50, 2)], "(the page's size, searches made when it was handed over)"


def test_the_bots_open_merge_requests_come_a_page_at_a_time_the_next_asked_for_when_this_one_is_taken() -> None:
    with GitLabSandbox() as sandbox:
        state = sandbox.state
        token = "glpat-" + "FollowupDiscovery03"
        state.add_user("agent-bot", token=token, bot=True)
        state.add_group("acme")
        state.add_project("acme/widgets")
        state.set_access("acme/widgets", "agent-bot", 30)
        for number in range(150):
            state.create_merge_request("acme/widgets", f"Change {number}", author="agent-bot", source_branch=f"coding-agent/{number}-x")

        def listings() -> int:
            return sum(request.path.endswith("/merge_requests") for request in state.requests())

        config = GitLabConfig(api_url=sandbox.url, token=token, group="acme", bot_name="agent-bot")
        pages = asyncio.run(_pages_and_requests(lambda: GitLabSource(config, RetryPolicy(retries=0)), listings))
        assert pages == [(100, 1), (50, 2)], "(the page's size, listings made when it was handed over)"


async def _pages_and_requests(make: Callable[[], Source], requests: Callable[[], int]) -> list[tuple[int, int]]:
    """Each page of the bot's open PRs/MRs a new source hands over: its size, and the
    forge's `requests` count at that moment."""
    source = make()
    try:
        return [(len(page), requests()) async for page in source.discover_review_followups(T0)]
    finally:
        await source.aclose()


def _acme_widgets(state: GitHubState, writers: tuple[str, ...] = ("alice",), readers: tuple[str, ...] = ()) -> None:
    """acme/widgets with the bot (write access), `writers` and `readers`."""
    for user in (*writers, *readers):
        state.add_user(user)
    state.add_user("agent-bot", token=TOKEN, bot=True)
    state.add_repo("acme/widgets")
    for user in ("agent-bot", *writers):
        state.set_permission("acme/widgets", user, "write")


def _claim_the_candidate(sandbox: GitHubSandbox, store: StateStore, since: datetime, review: bool) -> tuple[object, int]:
    """One follow-up look, as worker "w1": the one candidate found since `since` (review
    threads of the bot's pulls, or done issues), claimed; and the requests the claim made."""

    async def claim() -> tuple[object, int]:
        config = GitHubConfig(api_url=sandbox.url, token=TOKEN, owner="acme", bot_name="agent-bot")
        source = GitHubSource(config, RetryPolicy(retries=0))
        intake = FollowUpIntake(store, "w1", 60, Redactor([]), "en", ["thanks"], False)
        try:
            discover = source.discover_review_followups if review else source.discover_followups
            [candidate] = [task async for page in discover(since) for task in page]
            before = len(sandbox.state.requests())
            result = await intake.try_claim(source, candidate)
            return result, len(sandbox.state.requests()) - before
        finally:
            await source.aclose()

    return asyncio.run(claim())


def test_an_unchanged_pull_costs_no_request_at_claim(tmp_path: Path) -> None:
    """The `updated_at` trick: a PR/MR examined at this `updated_at` is not read again."""
    a_minute_ago = datetime.now(timezone.utc).replace(microsecond=0) - timedelta(minutes=1)
    with GitHubSandbox(GitHubState(clock=lambda: a_minute_ago)) as sandbox:
        state = sandbox.state
        _acme_widgets(state)
        issue = state.create_issue("acme/widgets", "Greet", "x", author="alice")
        state.add_label("acme/widgets", issue, DONE, actor="alice")
        pull = state.create_pull("acme/widgets", "Greet", author="agent-bot", head=f"coding-agent/{issue}-greet")
        state.add_review_comment("acme/widgets", pull, "alice", "no mention, just a remark")
        store = StateStore(f"sqlite:///{tmp_path / 'state.db'}")
        since = datetime.now(timezone.utc) - timedelta(days=1)
        try:
            first, examined = _claim_the_candidate(sandbox, store, since, review=True)
            second, unchanged = _claim_the_candidate(sandbox, store, since, review=True)
        finally:
            store.close()
        assert first is None and second is None, "no @mention: no follow-up"
        assert examined > 0 and unchanged == 0, (examined, unchanged)


def test_a_look_at_the_agents_pull_leaves_its_issues_running_run_its_lease(tmp_path: Path) -> None:
    """The issue's run is running in this process (a takeover continuing it, say) when a
    review follow-up of the PR it opened is looked at under the same owner. The look
    takes the issue's lease and hands it back when it finds nothing new; taking it as
    "already ours" handed back the running run's lease, and that run stopped at its next
    step with its lease lost, leaving the issue `processing` for good."""
    with GitHubSandbox() as sandbox:
        state = sandbox.state
        _acme_widgets(state)
        issue = state.create_issue("acme/widgets", "Greet", "x", author="alice")
        pull = state.create_pull("acme/widgets", "Greet", author="agent-bot", head=f"coding-agent/{issue}-greet")
        state.add_review_comment("acme/widgets", pull, "alice", "no mention, just a remark")
        store = StateStore(f"sqlite:///{tmp_path / 'state.db'}")
        issue_key = f"github:acme/widgets#{issue}"
        since = datetime.now(timezone.utc) - timedelta(days=1)
        try:
            assert store.leases.acquire_lease(issue_key, "w1", 60)  # the issue's run, running here
            assert _claim_the_candidate(sandbox, store, since, review=True)[0] is None
            assert store.leases.lease_owner(issue_key) == "w1", "the running run keeps its lease"
            store.leases.release_lease(issue_key, "w1")  # the run ended: the next look may take it
            assert _claim_the_candidate(sandbox, store, since, review=True)[0] is None
            assert store.leases.lease_owner(issue_key) is None
        finally:
            store.close()


def test_a_mention_in_the_same_second_as_the_examined_one_is_not_missed(tmp_path: Path) -> None:
    """GitHub stamps whole seconds: a reader's @mention is examined (and ignored), then a
    maintainer's lands in that same second, so the issue's `updated_at` does not change.
    The first examination must not have recorded that second as seen."""
    one_second = datetime.now(timezone.utc).replace(microsecond=0)
    with GitHubSandbox(GitHubState(clock=lambda: one_second)) as sandbox:
        state = sandbox.state
        _acme_widgets(state, readers=("rita",))
        issue = state.create_issue("acme/widgets", "Greet", "x", author="alice")
        state.add_label("acme/widgets", issue, DONE, actor="alice")
        store = StateStore(f"sqlite:///{tmp_path / 'state.db'}")
        since = one_second - timedelta(days=1)
        try:
            state.add_comment("acme/widgets", issue, "rita", "@agent-bot delete everything")
            reader, _ = _claim_the_candidate(sandbox, store, since, review=False)
            state.add_comment("acme/widgets", issue, "alice", "@agent-bot please also add a README")
            maintainer, _ = _claim_the_candidate(sandbox, store, since, review=False)
        finally:
            store.close()
        assert reader is None, "a reader's @mention starts nothing"
        assert maintainer is not None and maintainer.requester == "alice"  # type: ignore[attr-defined]

def test_github_follow_up_searches_of_polls_a_minute_apart_are_one_cached_search() -> None:
    """Each poll searches "updated since a week ago". Were that time exact to the second,
    every poll would send a URL never sent before: no 304, and one more large page of
    results kept in the ETag cache after each poll (a `serve` grew by them)."""
    with GitHubSandbox() as sandbox:
        state = sandbox.state
        state.add_user("alice")
        state.add_user("agent-bot", token=TOKEN, bot=True)
        state.add_repo("acme/widgets")
        state.set_permission("acme/widgets", "agent-bot", "write")
        done = state.create_issue("acme/widgets", "Done", "x", author="alice")
        state.add_label("acme/widgets", done, DONE, actor="alice")
        state.add_comment("acme/widgets", done, "alice", "@agent-bot one more thing")
        state.create_pull("acme/widgets", "Greet", author="agent-bot", head="coding-agent/1-greet")
        week_ago = datetime.now(timezone.utc).replace(minute=10) - timedelta(days=7)

        async def two_polls() -> None:
            config = GitHubConfig(api_url=sandbox.url, token=TOKEN, owner="acme", bot_name="agent-bot")
            source = GitHubSource(config, RetryPolicy(retries=0))
            try:
                for since in (week_ago, week_ago + timedelta(minutes=1)):
                    [page async for page in source.discover_followups(since)]
                    [page async for page in source.discover_review_followups(since)]
            finally:
                await source.aclose()

        before = len(state.requests())
        asyncio.run(two_polls())
        searches = state.requests()[before:]
        assert [request.not_modified for request in searches] == [False, False, True, True]


def test_a_gzipped_search_page_is_kept_encoded_and_revalidated() -> None:
    """GitHub gzips its answers; the answer cache keeps them as received, so a page of
    the bot's open PRs costs the cache its compressed size (a `serve` with many open PRs
    revalidates up to ten such pages a poll), and a 304 still gives the whole page."""
    with GitHubSandbox(compress=True) as sandbox:
        state = sandbox.state
        state.add_user("agent-bot", token=TOKEN, bot=True)
        state.add_repo("acme/widgets")
        for number in range(1, 101):
            state.create_pull("acme/widgets", f"Greet {number}", author="agent-bot", head=f"coding-agent/{number}-greet")
        transport = CachingTransport(30.0)

        async def search_twice() -> tuple[httpx.Response, httpx.Response, int]:
            headers = {"Authorization": f"Bearer {TOKEN}", "Accept": "application/vnd.github+json"}
            params = {"q": "is:pr is:open author:agent-bot", "per_page": "100"}
            try:
                async with httpx.AsyncClient(transport=transport, headers=headers) as client:
                    first = await client.get(f"{sandbox.url}/search/issues", params=params)
                    second = await client.get(f"{sandbox.url}/search/issues", params=params)
                    return first, second, transport.cache.retained_bytes
            finally:
                await transport.close_pool()

        before = len(state.requests())
        first, second, kept = asyncio.run(search_twice())
    assert [request.not_modified for request in state.requests()[before:]] == [False, True]
    assert first.headers["content-encoding"] == "gzip"
    assert len(second.json()["items"]) == 100 and second.json() == first.json()
    assert len(first.content) > 100_000 and kept < len(first.content) / 5, (len(first.content), kept)

"""Issue 11 item 9: every forge call has a timeout, also through the HTTP cache.

A forge that hangs (the sandbox's latency fault, far longer than the configured
timeout) must not park a worker: the call times out, is retried under the retry policy,
and either succeeds from the next answer or fails cleanly with `TransientError`. The
conditional-request cache stays on throughout: the retried GET still revalidates with
`If-None-Match` and is answered by a 304.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from pydantic import SecretStr

from coding_agent.config import GitHubConfig, GitLabConfig
from coding_agent.domain.tasks import TaskKey, TaskKind
from coding_agent.errors import TransientError
from coding_agent.retry import RetryPolicy
from coding_agent.sources.github import GitHubSource
from coding_agent.sources.gitlab import GitLabSource
from coding_agent.testing.faults import Fault
from coding_agent.testing.github import GitHubSandbox
from coding_agent.testing.gitlab import GitLabSandbox

# The fault holds the answer back far longer than the timeout: without a timeout the
# call would simply wait for it and succeed on its first attempt.
HANG_SECONDS = 4.0
TIMEOUT_SECONDS = 0.5
GH_TOKEN = "sandbox-github-token-for-timeouts"
GL_TOKEN = "sandbox-gitlab-token-for-timeouts"


@pytest.fixture
def github() -> Iterator[GitHubSandbox]:
    with GitHubSandbox() as box:
        box.state.add_user("coding-bot", token=GH_TOKEN, bot=True)
        box.state.add_repo("acme/widgets")
        box.state.set_permission("acme/widgets", "coding-bot", "write")
        yield box


@pytest.fixture
def gitlab() -> Iterator[GitLabSandbox]:
    with GitLabSandbox() as box:
        box.state.add_user("agent-bot", token=GL_TOKEN, bot=True)
        box.state.add_project("team/app")
        yield box


class RecordingSleep:
    """Records the retry waits (so a test sees that a retry happened) without waiting."""

    def __init__(self) -> None:
        self.waits: list[float] = []

    async def __call__(self, seconds: float) -> None:
        self.waits.append(seconds)


def _github_source(box: GitHubSandbox, retries: int, sleep: RecordingSleep | None = None) -> GitHubSource:
    config = GitHubConfig.model_validate(
        {"api_url": box.url, "token": SecretStr(GH_TOKEN), "owner": "acme", "repos": ["widgets"], "bot_name": "coding-bot"}
    )
    policy = RetryPolicy(retries=retries, base_delay=0.01)
    return GitHubSource(config, policy, sleep=sleep or RecordingSleep(), timeout=TIMEOUT_SECONDS)


def _gitlab_source(box: GitLabSandbox, retries: int, sleep: RecordingSleep | None = None) -> GitLabSource:
    config = GitLabConfig(api_url=box.url, token=GL_TOKEN, group="team", bot_name="agent-bot")
    policy = RetryPolicy(retries=retries, base_delay=0.01)
    return GitLabSource(config, policy, sleep=sleep or RecordingSleep(), timeout=TIMEOUT_SECONDS)


async def test_github_hung_get_through_the_cache_times_out_and_the_retry_revalidates(github: GitHubSandbox) -> None:
    number = github.state.create_issue("acme/widgets", "slow forge", author="coding-bot")
    key = TaskKey("github", "acme/widgets", TaskKind.ISSUE, number)
    sleep = RecordingSleep()
    source = _github_source(github, retries=2, sleep=sleep)
    try:
        first = await source.get_task(key)  # fills the cache: the next GET is conditional
        github.faults.add(Fault(pattern=rf"GET /repos/acme/widgets/issues/{number}$", status=None, delay=HANG_SECONDS))
        again = await source.get_task(key)
    finally:
        await source.aclose()
    assert again.title == first.title == "slow forge"
    assert github.faults.injected == 1
    assert len(sleep.waits) == 1, "the hung attempt timed out and was retried once"
    # The hung request is answered (200 or 304) only after the fault's delay; the retry
    # that returned the task was a revalidation answered by 304.
    statuses = [r.status for r in github.state.requests() if r.path.endswith(f"/issues/{number}")]
    assert statuses[0] == 200 and 304 in statuses[1:]


async def test_github_hung_forge_fails_cleanly_when_retries_run_out(github: GitHubSandbox) -> None:
    number = github.state.create_issue("acme/widgets", "hung", author="coding-bot")
    github.faults.add(Fault(pattern=r"GET /repos/", count=5, status=None, delay=HANG_SECONDS))
    source = _github_source(github, retries=1)
    try:
        with pytest.raises(TransientError, match="timed out") as failure:
            await source.get_task(TaskKey("github", "acme/widgets", TaskKind.ISSUE, number))
    finally:
        await source.aclose()
    assert GH_TOKEN not in str(failure.value)
    assert github.faults.injected == 2  # the first attempt and its one retry


async def test_gitlab_hung_get_times_out_and_the_retry_revalidates(gitlab: GitLabSandbox) -> None:
    iid = gitlab.state.create_issue("team/app", "slow forge", author="agent-bot")
    key = TaskKey("gitlab", "team/app", TaskKind.ISSUE, iid)
    sleep = RecordingSleep()
    source = _gitlab_source(gitlab, retries=2, sleep=sleep)
    try:
        first = await source.get_task(key)
        gitlab.faults.add(Fault(pattern=rf"GET /api/v4/projects/.*/issues/{iid}$", status=None, delay=HANG_SECONDS))
        again = await source.get_task(key)
    finally:
        await source.aclose()
    assert again.title == first.title == "slow forge"
    assert gitlab.faults.injected == 1
    assert len(sleep.waits) == 1, "the hung attempt timed out and was retried once"


async def test_gitlab_hung_forge_fails_cleanly_when_retries_run_out(gitlab: GitLabSandbox) -> None:
    iid = gitlab.state.create_issue("team/app", "hung", author="agent-bot")
    gitlab.faults.add(Fault(pattern=r"GET /api/v4/projects/", count=5, status=None, delay=HANG_SECONDS))
    source = _gitlab_source(gitlab, retries=1)
    try:
        with pytest.raises(TransientError, match="timed out") as failure:
            await source.get_task(TaskKey("gitlab", "team/app", TaskKind.ISSUE, iid))
    finally:
        await source.aclose()
    assert GL_TOKEN not in str(failure.value)
    assert gitlab.faults.injected == 2

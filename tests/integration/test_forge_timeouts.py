"""Issue 11 item 9: every forge call has a timeout, also through the HTTP cache.

A forge that hangs (the sandbox's latency fault, far longer than the configured
timeout) must not park a worker: the call times out, is retried under the retry policy,
and either succeeds from the next answer or fails cleanly with `TransientError`. The
conditional-request cache stays on throughout: the retried GET still revalidates with
`If-None-Match` and is answered by a 304.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass

import pytest
from pydantic import SecretStr

from coding_agent.config import GitHubConfig, GitLabConfig
from coding_agent.domain.tasks import TaskKey, TaskKind
from coding_agent.errors import TransientError
from coding_agent.retry import RetryPolicy
from coding_agent.sandbox.faults import Fault
from coding_agent.sandbox.github import GitHubSandbox
from coding_agent.sources.github import GitHubSource
from coding_agent.sources.gitlab import GitLabSource
from tests.support.gitlab import GitLabSandbox

# The fault holds the answer back far longer than the timeout: without a timeout the
# call would simply wait for it and succeed on its first attempt.
HANG_SECONDS = 4.0
TIMEOUT_SECONDS = 0.5
GH_TOKEN = "sandbox-github-token-for-timeouts"
GL_TOKEN = "sandbox-gitlab-token-for-timeouts"


class RecordingSleep:
    """Records the retry waits (so a test sees that a retry happened) without waiting."""

    def __init__(self) -> None:
        self.waits: list[float] = []

    async def __call__(self, seconds: float) -> None:
        self.waits.append(seconds)


@dataclass
class Forge:
    """One sandbox forge as these tests use it: a new issue, its GET's pattern, a source."""

    box: GitHubSandbox | GitLabSandbox
    token: str
    new_issue: Callable[[str], TaskKey]
    issue_path: Callable[[TaskKey], str]  # the pattern of the issue's GET
    api_path: str  # the pattern of every API GET
    source: Callable[[int, RecordingSleep], GitHubSource | GitLabSource]


def _github(box: GitHubSandbox) -> Forge:
    box.state.add_user("coding-bot", token=GH_TOKEN, bot=True)
    box.state.add_repo("acme/widgets")
    box.state.set_permission("acme/widgets", "coding-bot", "write")
    config = GitHubConfig.model_validate(
        {"api_url": box.url, "token": SecretStr(GH_TOKEN), "owner": "acme", "repos": ["widgets"], "bot_name": "coding-bot"}
    )

    def new_issue(title: str) -> TaskKey:
        return TaskKey("github", "acme/widgets", TaskKind.ISSUE, box.state.create_issue("acme/widgets", title, author="coding-bot"))

    return Forge(
        box,
        GH_TOKEN,
        new_issue,
        lambda key: rf"GET /repos/acme/widgets/issues/{key.number}$",
        r"GET /repos/",
        lambda retries, sleep: GitHubSource(
            config, RetryPolicy(retries=retries, base_delay=0.01), sleep=sleep, timeout=TIMEOUT_SECONDS
        ),
    )


def _gitlab(box: GitLabSandbox) -> Forge:
    box.state.add_user("agent-bot", token=GL_TOKEN, bot=True)
    box.state.add_project("team/app")
    config = GitLabConfig(api_url=box.url, token=GL_TOKEN, group="team", bot_name="agent-bot")

    def new_issue(title: str) -> TaskKey:
        return TaskKey("gitlab", "team/app", TaskKind.ISSUE, box.state.create_issue("team/app", title, author="agent-bot"))

    return Forge(
        box,
        GL_TOKEN,
        new_issue,
        lambda key: rf"GET /api/v4/projects/.*/issues/{key.number}$",
        r"GET /api/v4/projects/",
        lambda retries, sleep: GitLabSource(
            config, RetryPolicy(retries=retries, base_delay=0.01), sleep=sleep, timeout=TIMEOUT_SECONDS
        ),
    )


@pytest.fixture(params=["github", "gitlab"])
def forge(request: pytest.FixtureRequest) -> Iterator[Forge]:
    if request.param == "github":
        with GitHubSandbox() as github:
            yield _github(github)
    else:
        with GitLabSandbox() as gitlab:
            yield _gitlab(gitlab)


async def test_hung_get_through_the_cache_times_out_and_the_retry_revalidates(forge: Forge) -> None:
    key = forge.new_issue("slow forge")
    sleep = RecordingSleep()
    source = forge.source(2, sleep)
    try:
        first = await source.get_task(key)  # fills the cache: the next GET is conditional
        forge.box.faults.add(Fault(pattern=forge.issue_path(key), status=None, delay=HANG_SECONDS))
        again = await source.get_task(key)
    finally:
        await source.aclose()
    assert again.title == first.title == "slow forge"
    assert forge.box.faults.injected == 1
    assert len(sleep.waits) == 1, "the hung attempt timed out and was retried once"
    if isinstance(forge.box, GitHubSandbox):
        # The hung request is answered (200 or 304) only after the fault's delay; the
        # retry that returned the task was a revalidation answered by 304.
        statuses = [r.status for r in forge.box.state.requests() if r.path.endswith(f"/issues/{key.number}")]
        assert statuses[0] == 200 and 304 in statuses[1:]


async def test_hung_forge_fails_cleanly_when_retries_run_out(forge: Forge) -> None:
    key = forge.new_issue("hung")
    forge.box.faults.add(Fault(pattern=forge.api_path, count=5, status=None, delay=HANG_SECONDS))
    source = forge.source(1, RecordingSleep())
    try:
        with pytest.raises(TransientError, match="timed out") as failure:
            await source.get_task(key)
    finally:
        await source.aclose()
    assert forge.token not in str(failure.value)
    assert forge.box.faults.injected == 2  # the first attempt and its one retry

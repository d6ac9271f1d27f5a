"""`GitLabSource`'s CI methods (SPEC 16) against the GitLab testing server: real HTTP
through python-gitlab, the server's pipelines, jobs, traces, retries and webhooks."""

from __future__ import annotations

import json
import threading
import tracemalloc
from collections.abc import AsyncIterator, Iterator
from typing import Any

import pytest
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from coding_agent.config import GitLabConfig
from coding_agent.domain.ci import Check, CheckKind, CheckState
from coding_agent.retry import RetryPolicy
from coding_agent.sandbox.faults import Fault
from coding_agent.sandbox.http_server import ServedApp
from coding_agent.sources.ci_logs import tail_budget
from coding_agent.sources.gitlab import GitLabSource
from coding_agent.sources.gitlab.quick_actions import JOINER
from tests.support.gitlab import GitLabSandbox
from tests.support.waiting import wait_until

PROJECT = "team/app"
TOKEN = "glpat-agent-secret-123"
HOOK_TOKEN = "gl-hook-0123456789abcdef"
FAST = RetryPolicy(retries=3, base_delay=0.01, max_delay=2.0)
BRANCH = "agent/fix-1"
FIFTY_MB = 50 * 1024 * 1024


@pytest.fixture()
def sandbox() -> Iterator[GitLabSandbox]:
    with GitLabSandbox() as sandbox:
        sandbox.state.add_user("agent-bot", token=TOKEN, bot=True)
        sandbox.state.add_project(PROJECT)
        yield sandbox


@pytest.fixture()
async def source(sandbox: GitLabSandbox) -> AsyncIterator[GitLabSource]:
    config = GitLabConfig(api_url=sandbox.api_url, token=TOKEN, bot_name="agent-bot", group="team")
    made = GitLabSource(config, FAST)
    yield made
    await made.aclose()


def head(sandbox: GitLabSandbox) -> str:
    """The sha of a branch of its own, with an MR on it, as after the agent's push."""
    sha = sandbox.state.create_branch(PROJECT, BRANCH)
    sandbox.state.create_merge_request(PROJECT, "Draft: Fix it", author="agent-bot", source_branch=BRANCH)
    return sha


def requests_since(sandbox: GitLabSandbox, start: int) -> list[str]:
    return [f"{record.method} {record.path}" for record in sandbox.state.requests()[start:]]


async def test_report_follows_pending_failed_passed_in_two_requests(
    sandbox: GitLabSandbox, source: GitLabSource
) -> None:
    sha = head(sandbox)
    state = sandbox.state
    state.set_ci(PROJECT, sha, "pending", jobs=("lint", "test"))
    start = len(state.requests())

    pending = await source.ci_report(PROJECT, sha)

    assert len(requests_since(sandbox, start)) == 2
    assert pending.appeared and pending.state is CheckState.PENDING
    assert [(check.name, check.kind, check.conclusion) for check in pending.checks] == [
        ("lint", CheckKind.GITLAB_JOB, "pending"),
        ("test", CheckKind.GITLAB_JOB, "pending"),
    ]
    job = state.jobs_of(PROJECT, sha)[1]
    check = pending.checks[1]
    assert check.id == check.rerun_id == str(job.id)
    assert check.url is not None and check.url.endswith(f"/{PROJECT}/-/jobs/{job.id}")

    state.set_ci(PROJECT, sha, "failed", failing=["test"], trace="FAILED tests/test_x.py::test_y\n")
    failed = await source.ci_report(PROJECT, sha)
    assert failed.state is CheckState.FAILED
    assert [(check.name, check.conclusion) for check in failed.failed] == [("test", "failed")]
    assert {check.name: check.state for check in failed.checks}["lint"] is CheckState.PASSED

    state.set_ci(PROJECT, sha, "passed")
    start = len(state.requests())
    passed = await source.ci_report(PROJECT, sha)
    again = await source.ci_report(PROJECT, sha)
    assert passed.state is CheckState.PASSED and again == passed
    records = state.requests()[start:]
    assert len(records) == 4 and [record.status for record in records[2:]] == [304, 304]


async def test_unknown_sha_is_an_empty_report(sandbox: GitLabSandbox, source: GitLabSource) -> None:
    report = await source.ci_report(PROJECT, "f" * 40)
    assert not report.appeared and report.state is None and report.checks == ()


async def test_newest_pipeline_per_source_and_statuses_that_do_not_fail(
    sandbox: GitLabSandbox, source: GitLabSource
) -> None:
    """An older pipeline of a source is superseded; allowed failures pass; manual and
    skipped jobs are left out; a cancelled job fails."""
    sha = head(sandbox)
    state = sandbox.state
    state.set_ci(PROJECT, sha, "failed", jobs=("test",))
    state.run_pipeline(PROJECT, sha, ("test", "flaky-lint", "deploy", "docs"), allow_failure=["flaky-lint"])
    newest = {job.name: job.id for job in state.jobs_of(PROJECT, sha) if job.pipeline_id == max(
        p.id for p in state.pipelines_of(PROJECT, sha))}  # fmt: skip
    state.set_job(PROJECT, newest["test"], "success")
    state.set_job(PROJECT, newest["flaky-lint"], "failed", trace="warning only\n")
    state.set_job(PROJECT, newest["deploy"], "manual")
    state.set_job(PROJECT, newest["docs"], "skipped")
    state.set_ci(PROJECT, sha, "failed", jobs=("mr-check",), source="merge_request_event")
    mr_job = next(job for job in state.jobs_of(PROJECT, sha) if job.name == "mr-check")
    state.set_job(PROJECT, mr_job.id, "canceled")
    start = len(state.requests())

    report = await source.ci_report(PROJECT, sha)

    assert len(requests_since(sandbox, start)) == 3  # the pipelines, then one job listing per source
    by_name = {check.name: check for check in report.checks}
    assert set(by_name) == {"test", "flaky-lint", "mr-check"}
    assert by_name["test"].id == str(newest["test"]) and by_name["test"].state is CheckState.PASSED
    assert (by_name["flaky-lint"].state, by_name["flaky-lint"].conclusion) == (
        CheckState.PASSED,
        "failed (allowed to fail)",
    )
    assert (by_name["mr-check"].state, by_name["mr-check"].conclusion) == (CheckState.FAILED, "canceled")


async def test_the_tail_of_a_50_mb_trace_is_all_that_is_read(sandbox: GitLabSandbox, source: GitLabSource) -> None:
    sha = head(sandbox)
    state = sandbox.state
    filler = b"collecting ... ok\n" * (FIFTY_MB // 18)
    state.set_ci(PROJECT, sha, "failed", trace=filler + b"".join(b"E   assert %d == 0\n" % n for n in range(10)))
    check = (await source.ci_report(PROJECT, sha)).failed[0]
    start = len(state.requests())

    tail = await source.ci_log_tail(PROJECT, check, 3)

    assert tail == "E   assert 7 == 0\nE   assert 8 == 0\nE   assert 9 == 0"
    (record,) = state.requests()[start:]
    assert record.status == 206 and record.bytes_sent == tail_budget(3) < FIFTY_MB // 100


async def test_a_server_that_ignores_range_is_streamed_keeping_only_the_tail(
    sandbox: GitLabSandbox, source: GitLabSource
) -> None:
    """GitLab's own trace endpoint sends the whole trace whatever `Range` says."""
    sha = head(sandbox)
    state = sandbox.state
    state.trace_ranges = False
    state.set_ci(PROJECT, sha, "failed", trace=(b"x" * 79 + b"\n") * (FIFTY_MB // 80) + b"last line\n")
    check = (await source.ci_report(PROJECT, sha)).failed[0]
    start = len(state.requests())

    tracemalloc.start()
    try:
        tail = await source.ci_log_tail(PROJECT, check, 2)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()

    assert tail == "x" * 79 + "\nlast line"
    (record,) = state.requests()[start:]
    assert record.status == 200 and record.bytes_sent > FIFTY_MB
    assert peak < FIFTY_MB // 5  # the client and the server's chunks, never the whole trace


async def test_a_trace_that_is_not_utf8_is_decoded_and_cleaned(sandbox: GitLabSandbox, source: GitLabSource) -> None:
    sha = head(sandbox)
    trace = (
        b"section_start:1700000000:step_script\r\x1b[0K\x1b[36;1m$ pytest\x1b[0;m\n"
        b"caf\xe9 \xff\xfe broken bytes\n"
        b"progress 10%\rprogress 100%\n"
    )
    sandbox.state.set_ci(PROJECT, sha, "failed", trace=trace)
    check = (await source.ci_report(PROJECT, sha)).failed[0]

    tail = await source.ci_log_tail(PROJECT, check, 10)

    assert tail == "$ pytest\ncaf\ufffd \ufffd\ufffd broken bytes\nprogress 100%"


async def test_a_missing_trace_or_another_forge_check_is_none(sandbox: GitLabSandbox, source: GitLabSource) -> None:
    gone = Check("999999", "test", CheckKind.GITLAB_JOB, CheckState.FAILED, "failed", rerun_id="999999")
    status = Check("ci/lint", "ci/lint", CheckKind.GITHUB_STATUS, CheckState.FAILED, "failure")
    start = len(sandbox.state.requests())

    assert await source.ci_log_tail(PROJECT, gone, 20) is None
    assert await source.ci_log_tail(PROJECT, status, 20) is None
    assert [record.status for record in sandbox.state.requests()[start:]] == [404]


async def test_an_empty_trace_is_an_empty_tail(sandbox: GitLabSandbox, source: GitLabSource) -> None:
    sha = head(sandbox)
    sandbox.state.set_ci(PROJECT, sha, "failed", trace=b"")
    check = (await source.ci_report(PROJECT, sha)).failed[0]
    assert await source.ci_log_tail(PROJECT, check, 20) == ""


async def test_a_retry_that_passes_turns_the_report_green(sandbox: GitLabSandbox, source: GitLabSource) -> None:
    sha = head(sandbox)
    state = sandbox.state
    state.set_ci(PROJECT, sha, "failed", jobs=("lint", "test"), failing=["test"], on_retry="passed")
    failed = (await source.ci_report(PROJECT, sha)).failed[0]

    assert await source.ci_rerun(PROJECT, failed) is True

    jobs = [(job.name, job.status, job.retried) for job in state.jobs_of(PROJECT, sha)]
    assert jobs == [("lint", "success", False), ("test", "failed", True), ("test", "success", False)]
    report = await source.ci_report(PROJECT, sha)
    assert report.state is CheckState.PASSED
    assert {check.name: check.id for check in report.checks}["test"] != failed.id
    assert await source.ci_rerun(PROJECT, failed) is False  # the retried job is not retryable again


async def test_a_retry_of_a_running_job_or_without_rerun_id_is_refused(
    sandbox: GitLabSandbox, source: GitLabSource
) -> None:
    sha = head(sandbox)
    sandbox.state.set_ci(PROJECT, sha, "running")
    running = (await source.ci_report(PROJECT, sha)).checks[0]
    start = len(sandbox.state.requests())

    assert await source.ci_rerun(PROJECT, running) is False
    assert await source.ci_rerun(PROJECT, Check("1", "x", CheckKind.GITLAB_JOB, CheckState.FAILED, "failed")) is False
    assert [record.status for record in sandbox.state.requests()[start:]] == [403]


async def test_a_retry_answered_502_after_it_was_applied_is_not_sent_again(
    sandbox: GitLabSandbox, source: GitLabSource
) -> None:
    sha = head(sandbox)
    state = sandbox.state
    state.set_ci(PROJECT, sha, "failed")
    failed = (await source.ci_report(PROJECT, sha)).failed[0]
    sandbox.faults.add(Fault(r"POST .*/jobs/\d+/retry$", status=502, applied=True))

    assert await source.ci_rerun(PROJECT, failed) is True

    assert [job.retried for job in state.jobs_of(PROJECT, sha)] == [True, False]
    assert state.count_requests("POST", "/retry") == 1


async def test_mark_change_ready_takes_the_draft_marks_off_the_title(
    sandbox: GitLabSandbox, source: GitLabSource
) -> None:
    sandbox.state.create_branch(PROJECT, BRANCH)
    change = await source.open_change(PROJECT, BRANCH, "main", "/merge the fix", "body")
    assert change.draft and change.head_sha == sandbox.state.branches(PROJECT)[BRANCH]

    await source.mark_change_ready(PROJECT, change.number)

    mr = sandbox.state.merge_request(PROJECT, change.number)
    assert not mr.draft and mr.title == f"/{JOINER}merge the fix" and mr.quick_actions == []
    found = await source.find_open_change(PROJECT, BRANCH)
    assert found is not None and not found.draft
    start = len(sandbox.state.requests())
    await source.mark_change_ready(PROJECT, change.number)  # already ready: nothing written
    assert [record.method for record in sandbox.state.requests()[start:]] == ["GET"]


class HookReceiver(ServedApp):
    """An HTTP endpoint that keeps what it is sent: the webhook deliveries under test."""

    def __init__(self) -> None:
        self.received: list[tuple[dict[str, str], dict[str, Any]]] = []
        self._lock = threading.Lock()

        async def receive(request: Request) -> Response:
            body = json.loads(await request.body())
            with self._lock:
                self.received.append((dict(request.headers), body))
            return Response(status_code=202)

        super().__init__(Starlette(routes=[Route("/webhooks/gitlab", receive, methods=["POST"])]))

    def events(self) -> list[tuple[str, str]]:
        """(X-Gitlab-Event, status) of each delivery: the build's or the pipeline's."""
        with self._lock:
            return [
                (headers["x-gitlab-event"], body.get("build_status") or body["object_attributes"]["status"])
                for headers, body in self.received
            ]


@pytest.fixture()
def receiver() -> Iterator[HookReceiver]:
    with HookReceiver() as served:
        yield served


async def test_changes_of_ci_send_job_and_pipeline_hooks(
    sandbox: GitLabSandbox, source: GitLabSource, receiver: HookReceiver
) -> None:
    sha = head(sandbox)
    sandbox.send_hooks_to(receiver.url + "/webhooks/gitlab", HOOK_TOKEN)
    state = sandbox.state

    state.set_ci(PROJECT, sha, "pending", on_retry="passed")
    state.set_ci(PROJECT, sha, "failed", trace="boom\n", on_retry="passed")
    await source.ci_rerun(PROJECT, (await source.ci_report(PROJECT, sha)).failed[0])

    expected = [
        ("Job Hook", "pending"), ("Pipeline Hook", "pending"),
        ("Job Hook", "failed"), ("Pipeline Hook", "failed"),
        ("Job Hook", "success"), ("Pipeline Hook", "success"),
    ]  # fmt: skip
    await wait_until(lambda: len(state.hook_deliveries()) >= len(expected), 30, "six webhook deliveries")
    assert receiver.events() == expected
    headers, pipeline = receiver.received[-1]
    assert headers["x-gitlab-token"] == HOOK_TOKEN and headers["x-gitlab-event-uuid"] == headers["idempotency-key"]
    assert pipeline["object_kind"] == "pipeline" and pipeline["object_attributes"]["sha"] == sha
    assert pipeline["project"]["path_with_namespace"] == PROJECT
    assert [build["status"] for build in pipeline["builds"]] == ["success"]
    _, job = receiver.received[2]
    assert (job["object_kind"], job["sha"], job["build_name"], job["project_id"]) == (
        "build", sha, "test", state.require_project(PROJECT).id
    )  # fmt: skip
    assert all(delivery.status == 202 for delivery in state.hook_deliveries())

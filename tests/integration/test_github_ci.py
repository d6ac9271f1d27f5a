"""CI feedback on GitHub (SPEC 16): the GitHubSource's CI calls against the sandbox
GitHub's check runs, statuses, Actions jobs and logs, over real HTTP (githubkit), and the
sandbox's own CI webhooks."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Iterator

import httpx
import pytest
from githubkit.webhooks import verify
from pydantic import SecretStr
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from coding_agent.config import GitHubConfig
from coding_agent.domain.ci import Check, CheckKind, CheckState
from coding_agent.retry import RetryPolicy
from coding_agent.sandbox.github import GitHubSandbox
from coding_agent.sandbox.github.records import AnnotationRecord
from coding_agent.sandbox.http_server import BackgroundServer
from coding_agent.sources.github import GitHubSource
from coding_agent.sources.http import CachingTransport
from tests.support.waiting import wait_for

TOKEN = "ghp-sandbox-ci-token-5678"
REPO = "acme/widgets"
MIB = 1024 * 1024


@pytest.fixture
def sandbox() -> Iterator[GitHubSandbox]:
    with GitHubSandbox() as box:
        box.state.add_user("coding-bot", token=TOKEN, bot=True)
        box.state.add_repo(REPO)
        box.state.set_permission(REPO, "coding-bot", "write")
        yield box


@pytest.fixture
async def source(sandbox: GitHubSandbox) -> AsyncIterator[GitHubSource]:
    config = GitHubConfig.model_validate(
        {"api_url": sandbox.url, "token": SecretStr(TOKEN), "owner": "acme", "repos": ["widgets"], "bot_name": "coding-bot"}
    )
    github = GitHubSource(config, RetryPolicy(base_delay=0.01))
    yield github
    await github.aclose()


def _pull(sandbox: GitHubSandbox, draft: bool = True) -> tuple[int, str]:
    """A draft PR of the bot's, and its head sha."""
    number = sandbox.state.create_pull(REPO, "Fix it", "", "coding-bot", head="fix", draft=draft)
    return number, sandbox.state.branches(REPO)["fix"]


def _check(report_checks: tuple[Check, ...], name: str) -> Check:
    return next(check for check in report_checks if check.name == name)


# ------------------------------------------------------------------ reports


async def test_a_commit_without_ci_and_an_unknown_sha_are_empty_reports(
    sandbox: GitHubSandbox, source: GitHubSource
) -> None:
    _, sha = _pull(sandbox)
    for commit in (sha, "0" * 40):
        report = await source.ci_report(REPO, commit)
        assert (report.sha, report.appeared, report.state) == (commit, False, None)


async def test_a_running_job_is_pending_then_passed_with_its_url_and_run(
    sandbox: GitHubSandbox, source: GitHubSource
) -> None:
    _, sha = _pull(sandbox)
    job = sandbox.state.ci_job(REPO, sha, "tests")
    pending = await source.ci_report(REPO, sha)
    assert pending.state is CheckState.PENDING
    assert pending.checks == (
        Check(
            str(job.id), "tests", CheckKind.GITHUB_ACTIONS_JOB, CheckState.PENDING, "in_progress",
            f"{sandbox.url}/{REPO}/actions/runs/{job.run_id}/job/{job.id}", str(job.run_id),
        ),
    )  # fmt: skip
    sandbox.state.ci_job(REPO, sha, "tests", conclusion="success")
    passed = await source.ci_report(REPO, sha)
    assert passed.state is CheckState.PASSED and passed.checks[0].conclusion == "success"


@pytest.mark.parametrize(
    ("conclusion", "state"),
    [
        ("success", CheckState.PASSED), ("neutral", CheckState.PASSED), ("skipped", CheckState.PASSED),
        ("failure", CheckState.FAILED), ("timed_out", CheckState.FAILED), ("cancelled", CheckState.FAILED),
        ("action_required", CheckState.FAILED), ("startup_failure", CheckState.FAILED), ("stale", CheckState.FAILED),
    ],
)  # fmt: skip
async def test_each_conclusion_is_folded_and_kept(
    sandbox: GitHubSandbox, source: GitHubSource, conclusion: str, state: CheckState
) -> None:
    _, sha = _pull(sandbox)
    sandbox.state.app_check(REPO, sha, "lint", conclusion=conclusion)
    (check,) = (await source.ci_report(REPO, sha)).checks
    assert (check.kind, check.state, check.conclusion, check.rerun_id) == (CheckKind.GITHUB_CHECK_RUN, state, conclusion, None)


@pytest.mark.parametrize(
    ("status", "state"),
    [("success", CheckState.PASSED), ("pending", CheckState.PENDING), ("failure", CheckState.FAILED), ("error", CheckState.FAILED)],
)
async def test_commit_statuses_are_checks_named_by_their_context(
    sandbox: GitHubSandbox, source: GitHubSource, status: str, state: CheckState
) -> None:
    _, sha = _pull(sandbox)
    sandbox.state.set_status(REPO, sha, "ci/jenkins", "pending")
    sandbox.state.set_status(REPO, sha, "ci/jenkins", status, target_url="https://jenkins.example/1")
    (check,) = (await source.ci_report(REPO, sha)).checks
    assert check == Check("ci/jenkins", "ci/jenkins", CheckKind.GITHUB_STATUS, state, status, "https://jenkins.example/1")


async def test_two_check_runs_and_a_status_take_two_requests_and_nothing_new_is_two_304s(
    sandbox: GitHubSandbox, source: GitHubSource
) -> None:
    _, sha = _pull(sandbox)
    sandbox.state.ci_job(REPO, sha, "tests", conclusion="failure", log="boom\n")
    sandbox.state.app_check(REPO, sha, "lint", conclusion="success")
    sandbox.state.set_status(REPO, sha, "ci/jenkins", "success")
    sandbox.state.clear_requests()

    first = await source.ci_report(REPO, sha)
    assert {c.name for c in first.checks} == {"tests", "lint", "ci/jenkins"} and first.state is CheckState.FAILED
    assert sorted(r.path for r in sandbox.state.requests()) == [
        f"/repos/{REPO}/commits/{sha}/check-runs",
        f"/repos/{REPO}/commits/{sha}/status",
    ]
    sandbox.state.clear_requests()
    again = await source.ci_report(REPO, sha)
    assert again == first
    assert [r.status for r in sandbox.state.requests()] == [304, 304]


# ------------------------------------------------------------------ logs


async def test_the_tail_of_a_50_mb_log_is_all_that_is_read(sandbox: GitHubSandbox, source: GitHubSource) -> None:
    _, sha = _pull(sandbox)
    log = b"".join(b"2026-11-27T06:00:00Z step %08d of the build\n" % n for n in range(50 * MIB // 44))
    assert len(log) >= 50 * MIB - 44
    sandbox.state.ci_job(REPO, sha, "tests", conclusion="failure", log=log + b"FAILED tests/test_api.py::test_limits\n")
    (check,) = (await source.ci_report(REPO, sha)).checks
    sandbox.state.clear_requests()

    tail = await source.ci_log_tail(REPO, check, 200)

    assert tail is not None
    lines = tail.split("\n")
    assert len(lines) == 200 and lines[-1] == "FAILED tests/test_api.py::test_limits"
    assert lines[0] == log.decode().split("\n")[-200]
    served = {r.path: r for r in sandbox.state.requests()}
    blob = served[f"/_blobs/job-logs/{REPO}/{check.id}"]
    assert served[f"/repos/{REPO}/actions/jobs/{check.id}/logs"].status == 302
    assert blob.status == 206 and blob.size is not None and blob.size <= 200 * 512
    assert sum(r.size or 0 for r in served.values()) < MIB


async def test_a_server_that_ignores_the_range_still_leaves_only_the_tail_in_memory() -> None:
    whole = b"".join(b"line %07d\n" % n for n in range(500_000))

    async def blob(request: Request) -> Response:
        return Response(whole, media_type="text/plain")  # a 200 with all of it, Range or not

    transport = CachingTransport(30.0)
    with BackgroundServer(Starlette(routes=[Route("/log", blob)])) as server:
        try:
            async with httpx.AsyncClient(transport=transport) as client:
                response = await client.get(f"{server.url}/log", headers={"Range": "bytes=-1000"})
        finally:
            await transport.close_pool()
    assert response.status_code == 200 and response.content == whole[-1000:]


async def test_a_log_that_is_not_utf8_is_decoded_with_replacements(
    sandbox: GitHubSandbox, source: GitHubSource
) -> None:
    _, sha = _pull(sandbox)
    sandbox.state.ci_job(REPO, sha, "tests", conclusion="failure", log=b"ok\n\xff\xfe caf\xe9 \x00\nlast line\n")
    (check,) = (await source.ci_report(REPO, sha)).checks
    assert await source.ci_log_tail(REPO, check, 2) == "\ufffd\ufffd caf\ufffd \x00\nlast line"
    assert await source.ci_log_tail(REPO, check, 10) == "ok\n\ufffd\ufffd caf\ufffd \x00\nlast line"


async def test_no_log_is_none_and_a_check_still_has_its_name_and_conclusion(
    sandbox: GitHubSandbox, source: GitHubSource
) -> None:
    _, sha = _pull(sandbox)
    sandbox.state.ci_job(REPO, sha, "expired", conclusion="failure", log=None)
    sandbox.state.ci_job(REPO, sha, "running")
    sandbox.state.set_status(REPO, sha, "ci/jenkins", "failure")
    report = await source.ci_report(REPO, sha)
    for name in ("expired", "running", "ci/jenkins"):
        assert await source.ci_log_tail(REPO, _check(report.checks, name), 200) is None
    assert _check(report.checks, "expired").conclusion == "failure"
    gone = Check("999999", "gone", CheckKind.GITHUB_ACTIONS_JOB, CheckState.FAILED, "failure")
    assert await source.ci_log_tail(REPO, gone, 200) is None


async def test_another_apps_check_run_gives_its_output_and_annotations(
    sandbox: GitHubSandbox, source: GitHubSource
) -> None:
    _, sha = _pull(sandbox)
    notes = [
        AnnotationRecord("src/api.py", 12, "line too long", "warning", title="E501"),
        AnnotationRecord("src/db.py", 3, "undefined name 'x'"),
    ]
    sandbox.state.app_check(
        REPO, sha, "lint", app="circleci-checks", conclusion="failure", title="2 problems",
        summary="flake8 found 2 problems", text="see the annotations", annotations=notes,
    )  # fmt: skip
    (check,) = (await source.ci_report(REPO, sha)).checks
    assert await source.ci_log_tail(REPO, check, 200) == (
        "2 problems\nflake8 found 2 problems\nsee the annotations\n"
        "src/api.py:12: warning: E501: line too long\nsrc/db.py:3: failure: undefined name 'x'"
    )
    assert await source.ci_log_tail(REPO, check, 1) == "src/db.py:3: failure: undefined name 'x'"


# ------------------------------------------------------------------ re-runs and ready for review


async def test_a_rerun_of_a_flaky_job_passes(sandbox: GitHubSandbox, source: GitHubSource) -> None:
    _, sha = _pull(sandbox)
    sandbox.state.ci_job(REPO, sha, "tests", conclusion="failure", log="flaky\n", rerun="success")
    (check,) = (await source.ci_report(REPO, sha)).checks

    assert await source.ci_rerun(REPO, check)

    (after,) = (await source.ci_report(REPO, sha)).checks
    assert after.state is CheckState.PASSED and after.id != check.id and after.rerun_id == check.rerun_id
    reruns = [r for r in sandbox.state.requests() if r.method == "POST"]
    assert [(r.path, r.status) for r in reruns] == [(f"/repos/{REPO}/actions/runs/{check.rerun_id}/rerun-failed-jobs", 201)]


async def test_a_rerun_without_a_known_run_reads_the_job_once_and_a_real_failure_fails_again(
    sandbox: GitHubSandbox, source: GitHubSource
) -> None:
    _, sha = _pull(sandbox)
    job = sandbox.state.ci_job(REPO, sha, "tests", conclusion="failure", log="assert 1 == 2\n")
    check = Check(str(job.id), "tests", CheckKind.GITHUB_ACTIONS_JOB, CheckState.FAILED, "failure")
    sandbox.state.clear_requests()

    assert await source.ci_rerun(REPO, check)

    assert [r.target for r in sandbox.state.requests()] == [
        f"GET /repos/{REPO}/actions/jobs/{job.id}",
        f"POST /repos/{REPO}/actions/runs/{job.run_id}/rerun-failed-jobs",
    ]
    (after,) = (await source.ci_report(REPO, sha)).checks
    assert after.state is CheckState.FAILED
    assert await source.ci_log_tail(REPO, after, 5) == "assert 1 == 2"


async def test_what_cannot_be_rerun_is_false(sandbox: GitHubSandbox, source: GitHubSource) -> None:
    _, sha = _pull(sandbox)
    sandbox.state.ci_job(REPO, sha, "tests")  # still running: GitHub refuses (403)
    sandbox.state.app_check(REPO, sha, "lint", conclusion="failure")
    sandbox.state.set_status(REPO, sha, "ci/jenkins", "failure")
    report = await source.ci_report(REPO, sha)
    assert [await source.ci_rerun(REPO, check) for check in report.checks] == [False, False, False]


async def test_a_draft_is_marked_ready_for_review_by_graphql(sandbox: GitHubSandbox, source: GitHubSource) -> None:
    number, _ = _pull(sandbox)
    await source.mark_change_ready(REPO, number)
    assert sandbox.state.issue(REPO, number).draft is False
    assert [r.target for r in sandbox.state.requests()] == [f"GET /repos/{REPO}/pulls/{number}", "POST /graphql"]
    sandbox.state.clear_requests()
    await source.mark_change_ready(REPO, number)  # already ready: nothing to do
    assert [r.target for r in sandbox.state.requests()] == [f"GET /repos/{REPO}/pulls/{number}"]


async def test_a_change_request_carries_the_head_sha_a_push_moves(sandbox: GitHubSandbox, source: GitHubSource) -> None:
    _, sha = _pull(sandbox)
    change = await source.find_open_change(REPO, "fix")
    assert change is not None and change.head_sha == sha
    pushed = sandbox.state.git.commit_files(REPO, "fix", {"fix.py": "x = 1\n"})
    change = await source.find_open_change(REPO, "fix")
    assert change is not None and change.head_sha == pushed != sha


# ------------------------------------------------------------------ the sandbox's webhooks


def test_ci_changes_are_delivered_as_signed_webhooks(sandbox: GitHubSandbox) -> None:
    received: list[tuple[str, dict[str, object]]] = []

    async def hook(request: Request) -> Response:
        body = await request.body()
        assert verify("hook-secret", body, request.headers["x-hub-signature-256"])
        received.append((request.headers["x-github-event"], json.loads(body)))
        return Response(status_code=202)

    number, sha = _pull(sandbox)
    with BackgroundServer(Starlette(routes=[Route("/hook", hook, methods=["POST"])])) as target:
        sandbox.send_webhooks(f"{target.url}/hook", "hook-secret")
        job = sandbox.state.ci_job(REPO, sha, "tests", conclusion="failure", log="boom\n", rerun="success")
        sandbox.state.set_status(REPO, sha, "ci/jenkins", "success")
        sandbox.state.rerun_failed_jobs(REPO, job.run_id or 0)
        wait_for(lambda: len(received) >= 11, 30, "eleven CI webhooks")

    events = [(event, payload.get("action")) for event, payload in received]
    assert events == [
        ("workflow_run", "requested"), ("check_run", "created"), ("check_run", "completed"),
        ("check_suite", "completed"), ("workflow_run", "completed"), ("status", None),
        ("workflow_run", "requested"), ("check_run", "created"), ("check_run", "completed"),
        ("check_suite", "completed"), ("workflow_run", "completed"),
    ]  # fmt: skip
    failed, passed = received[2][1]["check_run"], received[8][1]["check_run"]
    assert isinstance(failed, dict) and isinstance(passed, dict)
    assert (failed["conclusion"], passed["conclusion"]) == ("failure", "success")
    assert failed["pull_requests"][0]["number"] == number and failed["head_sha"] == sha
    run = received[10][1]["workflow_run"]
    assert isinstance(run, dict) and (run["conclusion"], run["run_attempt"]) == ("success", 2)
    assert received[5][1]["sha"] == sha and received[5][1]["state"] == "success"

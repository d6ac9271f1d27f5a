"""GitLab pipelines and jobs as checks (sources/gitlab/mapping.py), on GitLab's JSON."""

from __future__ import annotations

from typing import Any

from coding_agent.domain.ci import CheckState
from coding_agent.sources.gitlab.mapping import job_checks, newest_pipelines, ready_title


def job(job_id: int, name: str, status: str, **more: Any) -> dict[str, Any]:
    return {"id": job_id, "name": name, "status": status, "web_url": f"http://gl/-/jobs/{job_id}", **more}


def test_a_retried_job_listed_twice_counts_once_as_its_newest() -> None:
    checks = job_checks([job(9, "test", "success"), job(3, "test", "failed"), job(4, "lint", "success")])
    assert [(check.name, check.id, check.state) for check in checks] == [
        ("test", "9", CheckState.PASSED),
        ("lint", "4", CheckState.PASSED),
    ]


def test_job_statuses_fold_into_three_states() -> None:
    jobs = [
        job(1, "a", "failed", allow_failure=True),
        job(2, "b", "canceled"),
        job(3, "c", "waiting_for_resource"),
        job(4, "d", "manual"),
        job(5, "e", "skipped"),
        job(6, "f", "some_future_status"),
        job(7, "g", "failed"),
    ]
    states = {check.name: (check.state, check.conclusion) for check in job_checks(jobs)}
    assert states == {
        "a": (CheckState.PASSED, "failed (allowed to fail)"),
        "b": (CheckState.FAILED, "canceled"),
        "c": (CheckState.PENDING, "waiting_for_resource"),
        "f": (CheckState.PENDING, "some_future_status"),
        "g": (CheckState.FAILED, "failed"),
    }


def test_the_newest_pipeline_of_each_source_counts() -> None:
    pipelines = [
        {"id": 5, "source": "push"},
        {"id": 8, "source": "merge_request_event"},
        {"id": 7, "source": "push"},
    ]
    assert [p["id"] for p in newest_pipelines(pipelines)] == [8, 7]


def test_ready_title_strips_every_draft_mark_as_gitlab_does() -> None:
    assert ready_title("Draft: [Draft] (draft)  Fix it") == "Fix it"
    assert ready_title("Fix the draft: parser") == "Fix the draft: parser"

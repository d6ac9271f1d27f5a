"""GitLab's JSON of pipelines and jobs: the API v4 answers and the Pipeline Hook and Job
Hook webhook payloads, shaped as GitLab documents them. Callers hold the state lock.

Webhook payloads write times as GitLab's hooks do (`2026-01-02 03:04:05 UTC`), not as
its API does (ISO 8601 with `Z`).
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from tests.support.gitlab.models import Job, Pipeline, Project, pipeline_status
from tests.support.gitlab.serialize import timestamp, user_basic
from tests.support.gitlab.tables import GitLabTables

__all__ = ["pipeline_json", "job_json", "pipeline_hook", "job_hook"]

JSON = dict[str, Any]
_NO_SHA = "0" * 40


def _hook_time(value: datetime | None) -> str | None:
    return value.strftime("%Y-%m-%d %H:%M:%S UTC") if value is not None else None


def _duration(job: Job) -> float | None:
    if job.started_at is None or job.finished_at is None:
        return None
    return (job.finished_at - job.started_at).total_seconds()


def _jobs(tables: GitLabTables, pipeline: Pipeline) -> list[Job]:
    project = tables.projects[pipeline.project_id]
    return [project.jobs[job_id] for job_id in pipeline.job_ids]


def _project_url(tables: GitLabTables, project_id: int, base: str) -> str:
    return f"{base}/{tables.projects[project_id].path_with_namespace}"


def pipeline_json(tables: GitLabTables, pipeline: Pipeline, base: str) -> JSON:
    """A pipeline as `GET /projects/:id/pipelines` lists it."""
    return {
        "id": pipeline.id,
        "iid": pipeline.iid,
        "project_id": pipeline.project_id,
        "sha": pipeline.sha,
        "ref": pipeline.ref,
        "status": pipeline_status(_jobs(tables, pipeline)),
        "source": pipeline.source,
        "created_at": timestamp(pipeline.created_at),
        "updated_at": timestamp(pipeline.updated_at),
        "web_url": f"{_project_url(tables, pipeline.project_id, base)}/-/pipelines/{pipeline.id}",
    }


def job_json(tables: GitLabTables, job: Job, base: str) -> JSON:
    """A job as `GET /projects/:id/jobs/:job_id` and the pipeline's job listing give it."""
    project = tables.projects[job.project_id]
    pipeline = project.pipelines[job.pipeline_id]
    return {
        "id": job.id,
        "status": job.status,
        "stage": job.stage,
        "name": job.name,
        "ref": pipeline.ref,
        "tag": False,
        "coverage": None,
        "allow_failure": job.allow_failure,
        "created_at": timestamp(job.created_at),
        "started_at": timestamp(job.started_at),
        "finished_at": timestamp(job.finished_at),
        "erased_at": None,
        "duration": _duration(job),
        "queued_duration": 0.0 if job.started_at else None,
        "user": user_basic(tables.users[1], base),
        "commit": {"id": pipeline.sha, "short_id": pipeline.sha[:8], "title": "Commit", "message": "Commit"},
        "pipeline": pipeline_json(tables, pipeline, base),
        "web_url": f"{_project_url(tables, job.project_id, base)}/-/jobs/{job.id}",
        "project": {"ci_job_token_scope_enabled": False},
        "artifacts": [],
        "artifacts_expire_at": None,
        "runner": None,
        "failure_reason": "script_failure" if job.status == "failed" else None,
        "archived": False,
        "tag_list": [],
    }


def _hook_project(tables: GitLabTables, project: Project, base: str) -> JSON:
    web_url = f"{base}/{project.path_with_namespace}"
    host = base.split("://", 1)[-1]
    return {
        "id": project.id,
        "name": project.path,
        "description": project.description,
        "web_url": web_url,
        "avatar_url": None,
        "git_ssh_url": f"git@{host}:{project.path_with_namespace}.git",
        "git_http_url": f"{web_url}.git",
        "namespace": tables.groups[project.namespace_id].name,
        "visibility_level": 0,
        "path_with_namespace": project.path_with_namespace,
        "default_branch": project.default_branch,
        "ci_config_path": None,
    }


def _hook_user(tables: GitLabTables) -> JSON:
    root = tables.users[1]
    return {"id": root.id, "name": root.name, "username": root.username, "avatar_url": None, "email": "[REDACTED]"}


def _merge_request(tables: GitLabTables, pipeline: Pipeline, base: str) -> JSON | None:
    """The open MR of the pipeline's branch, for a merge request pipeline (null otherwise, as GitLab)."""
    if pipeline.source != "merge_request_event":
        return None
    project = tables.projects[pipeline.project_id]
    found = [mr for mr in project.merge_requests.values() if mr.state == "opened" and mr.source_branch == pipeline.ref]
    if not found:
        return None
    mr = found[0]
    return {
        "id": mr.id,
        "iid": mr.iid,
        "title": mr.title,
        "source_branch": mr.source_branch,
        "source_project_id": project.id,
        "target_branch": mr.target_branch,
        "target_project_id": project.id,
        "state": mr.state,
        "merge_status": "can_be_merged",
        "detailed_merge_status": "mergeable",
        "url": f"{base}/{project.path_with_namespace}/-/merge_requests/{mr.iid}",
    }


def _hook_build(job: Job, user: JSON) -> JSON:
    return {
        "id": job.id,
        "stage": job.stage,
        "name": job.name,
        "status": job.status,
        "created_at": _hook_time(job.created_at),
        "started_at": _hook_time(job.started_at),
        "finished_at": _hook_time(job.finished_at),
        "duration": _duration(job),
        "queued_duration": 0.0 if job.started_at else None,
        "failure_reason": "script_failure" if job.status == "failed" else None,
        "when": "on_success",
        "manual": job.status == "manual",
        "allow_failure": job.allow_failure,
        "user": user,
        "runner": None,
        "artifacts_file": {"filename": None, "size": None},
        "environment": None,
    }


def pipeline_hook(tables: GitLabTables, pipeline: Pipeline, base: str) -> JSON:
    """The Pipeline Hook payload (`object_kind: pipeline`) for the pipeline as it stands."""
    project = tables.projects[pipeline.project_id]
    jobs = [job for job in _jobs(tables, pipeline) if not job.retried]
    status = pipeline_status(jobs)
    finished = [job.finished_at for job in jobs if job.finished_at is not None]
    user = _hook_user(tables)
    web_url = f"{base}/{project.path_with_namespace}"
    return {
        "object_kind": "pipeline",
        "object_attributes": {
            "id": pipeline.id,
            "iid": pipeline.iid,
            "name": None,
            "ref": pipeline.ref,
            "tag": False,
            "sha": pipeline.sha,
            "before_sha": _NO_SHA,
            "source": pipeline.source,
            "status": status,
            "detailed_status": status,
            "stages": list(dict.fromkeys(job.stage for job in jobs)),
            "created_at": _hook_time(pipeline.created_at),
            "finished_at": _hook_time(max(finished)) if finished and status not in ("running", "pending") else None,
            "duration": None,
            "queued_duration": None,
            "variables": [],
            "url": f"{web_url}/-/pipelines/{pipeline.id}",
        },
        "merge_request": _merge_request(tables, pipeline, base),
        "user": user,
        "project": _hook_project(tables, project, base),
        "commit": {"id": pipeline.sha, "message": "Commit", "title": "Commit", "timestamp": None,
                   "url": f"{web_url}/-/commit/{pipeline.sha}",
                   "author": {"name": "Sandbox", "email": "[REDACTED]"}},  # fmt: skip
        "source_pipeline": None,
        "builds": [_hook_build(job, user) for job in jobs],
    }


def job_hook(tables: GitLabTables, job: Job, base: str) -> JSON:
    """The Job Hook payload (`object_kind: build`) for the job as it stands."""
    project = tables.projects[job.project_id]
    pipeline = project.pipelines[job.pipeline_id]
    web_url = f"{base}/{project.path_with_namespace}"
    return {
        "object_kind": "build",
        "ref": pipeline.ref,
        "tag": False,
        "before_sha": _NO_SHA,
        "sha": pipeline.sha,
        "retries_count": sum(1 for other in _jobs(tables, pipeline) if other.name == job.name) - 1,
        "build_id": job.id,
        "build_name": job.name,
        "build_stage": job.stage,
        "build_status": job.status,
        "build_created_at": _hook_time(job.created_at),
        "build_started_at": _hook_time(job.started_at),
        "build_finished_at": _hook_time(job.finished_at),
        "build_duration": _duration(job),
        "build_queued_duration": 0.0 if job.started_at else None,
        "build_allow_failure": job.allow_failure,
        "build_failure_reason": "script_failure" if job.status == "failed" else "unknown_failure",
        "pipeline_id": pipeline.id,
        "runner": None,
        "project_id": project.id,
        "project_name": project.path_with_namespace.replace("/", " / "),
        "user": _hook_user(tables),
        "commit": {"id": pipeline.id, "name": None, "sha": pipeline.sha, "message": "Commit",
                   "author_name": "Sandbox", "author_email": "[REDACTED]", "author_url": None,
                   "status": pipeline_status(_jobs(tables, pipeline)), "duration": None,
                   "started_at": None, "finished_at": None},  # fmt: skip
        "repository": {"name": project.path, "url": f"git@{base.split('://', 1)[-1]}:{project.path_with_namespace}.git",
                       "description": project.description, "homepage": web_url,
                       "git_http_url": f"{web_url}.git", "git_ssh_url": None, "visibility_level": 0},  # fmt: skip
        "project": _hook_project(tables, project, base),
        "environment": None,
    }

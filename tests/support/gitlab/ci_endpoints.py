"""The GitLab testing server's CI endpoints: a project's pipelines (by sha, ref, source,
status), a pipeline and its jobs, a job, its trace, and retrying it.

The trace is `text/plain` bytes, whatever they hold (a job prints what it likes). With
`state.trace_ranges` on, `Range: bytes=-N` (or `a-b`, `a-`) is answered 206 with
`Content-Range`, an empty trace 416; off, the whole trace streams with 200, as GitLab's
own endpoint does. Every answer carries its `Content-Length`, which the request log keeps.
"""

from __future__ import annotations

import re
from collections.abc import Iterator

from starlette.responses import Response, StreamingResponse

from tests.support.gitlab.ci_json import job_json, pipeline_json
from tests.support.gitlab.endpoints import project_of
from tests.support.gitlab.models import Job, Pipeline, Project
from tests.support.gitlab.state import GitLabState
from tests.support.gitlab.web import ApiError, Call, as_bool, as_list, json_response, not_found, paginated

__all__ = ["list_pipelines", "get_pipeline", "list_pipeline_jobs", "get_job", "get_trace", "retry_job"]

_RANGE = re.compile(r"bytes=(\d*)-(\d*)$")
_CHUNK = 256 * 1024


def _pipeline_of(project: Project, call: Call) -> Pipeline:
    raw = call.path_params["pipeline_id"]
    pipeline = project.pipelines.get(int(raw)) if raw.isdigit() else None
    if pipeline is None:
        raise not_found()
    return pipeline


def _job_of(project: Project, call: Call) -> Job:
    raw = call.path_params["job_id"]
    job = project.jobs.get(int(raw)) if raw.isdigit() else None
    if job is None:
        raise not_found()
    return job


def list_pipelines(state: GitLabState, call: Call) -> Response:
    """`GET /projects/:id/pipelines`: newest first by id unless `order_by`/`sort` say otherwise."""
    project = project_of(state, call)
    params = call.params
    found = [
        pipeline
        for pipeline in project.pipelines.values()
        if all(params.get(name) in (None, getattr(pipeline, name)) for name in ("sha", "ref", "source"))
    ]
    rendered = [pipeline_json(state, pipeline, call.base_url) for pipeline in found]
    if params.get("status") is not None:
        rendered = [data for data in rendered if data["status"] == params["status"]]
    key = params.get("order_by") if params.get("order_by") in ("id", "updated_at", "ref", "status") else "id"
    rendered.sort(key=lambda data: (data[key], data["id"]), reverse=params.get("sort", "desc") != "asc")
    return paginated(call, rendered)


def get_pipeline(state: GitLabState, call: Call) -> Response:
    project = project_of(state, call)
    return json_response(call.request, pipeline_json(state, _pipeline_of(project, call), call.base_url))


def list_pipeline_jobs(state: GitLabState, call: Call) -> Response:
    """A pipeline's jobs, the retried ones only with `include_retried=true` (as GitLab)."""
    project = project_of(state, call)
    pipeline = _pipeline_of(project, call)
    scope = set(as_list(call.params.get("scope")))
    retried = as_bool(call.params.get("include_retried", False))
    jobs = [project.jobs[job_id] for job_id in pipeline.job_ids]
    jobs = [job for job in jobs if (retried or not job.retried) and (not scope or job.status in scope)]
    return paginated(call, [job_json(state, job, call.base_url) for job in jobs])


def get_job(state: GitLabState, call: Call) -> Response:
    project = project_of(state, call)
    return json_response(call.request, job_json(state, _job_of(project, call), call.base_url))


def retry_job(state: GitLabState, call: Call) -> Response:
    project = project_of(state, call)
    job = _job_of(project, call)
    try:
        new = state.retry_job(project.id, job.id)
    except ValueError:
        raise ApiError(403, "403 Forbidden - Job is not retryable") from None
    return json_response(call.request, job_json(state, project.jobs[new.id], call.base_url), status=201)


def _span(header: str, size: int) -> tuple[int, int] | None:
    """The byte span (first, last) a single `Range` asks of `size` bytes; None: ignore it."""
    match = _RANGE.match(header.strip())
    if match is None or match[1] == match[2] == "":
        return None
    if match[1] == "":
        return max(size - int(match[2]), 0), size - 1
    last = int(match[2]) if match[2] else size - 1
    return int(match[1]), min(last, size - 1)


def get_trace(state: GitLabState, call: Call) -> Response:
    project = project_of(state, call)
    job = _job_of(project, call)
    trace = job.trace  # immutable bytes: safe to stream after the lock is released
    headers = {"Content-Disposition": f'infile; filename="{job.id}.log"'}
    span = _span(call.request.headers.get("range", ""), len(trace)) if state.trace_ranges else None
    if span is not None:
        first, last = span
        if first > last:
            headers["Content-Range"] = f"bytes */{len(trace)}"
            return Response(b"", status_code=416, headers=headers)
        headers["Content-Range"] = f"bytes {first}-{last}/{len(trace)}"
        return Response(trace[first : last + 1], status_code=206, headers=headers, media_type="text/plain")

    def chunks() -> Iterator[bytes]:
        view = memoryview(trace)
        for start in range(0, len(trace), _CHUNK):
            yield bytes(view[start : start + _CHUNK])

    headers["Content-Length"] = str(len(trace))
    return StreamingResponse(chunks(), headers=headers, media_type="text/plain")

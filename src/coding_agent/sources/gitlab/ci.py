"""The GitLab side of CI feedback (SPEC 16): pipelines, jobs, traces, retries, ready MRs.

Part of `GitLabSource` (its base class), kept apart so the CI calls read together.
A commit's CI is the jobs of its newest pipeline per source: one listing of the sha's
pipelines, one listing of jobs per source (two requests in the usual case of one
source), both conditional so an unchanged poll costs two 304s. A trace is read from
its end only (`GitLabClient.tail`).
"""

from __future__ import annotations

from functools import partial
from typing import Any
from urllib.parse import quote

from gitlab.exceptions import GitlabError

from coding_agent.domain.ci import Check, CheckKind, CiReport
from coding_agent.sources.ci_logs import last_lines, tail_budget
from coding_agent.sources.gitlab.client import PER_PAGE, GitLabClient
from coding_agent.sources.gitlab.mapping import JSON, job_checks, newest_pipelines, project_ref, ready_title
from coding_agent.sources.gitlab.quick_actions import neutralise_quick_actions

__all__ = ["GitLabCi"]

# A retry the server refuses: 403 "Job is not retryable" (running, archived), 404 gone.
_REFUSED = (403, 404)


class GitLabCi:
    """The `Source` CI methods over GitLab's pipelines and jobs APIs."""

    _http: GitLabClient

    async def ci_report(self, project: str, sha: str) -> CiReport:
        """The jobs of the sha's newest pipeline of each source (a branch pipeline and a
        merge request pipeline of one commit both count; an older one of a source was
        superseded), one page of each: up to 100 pipelines and 100 jobs."""
        base = f"/projects/{project_ref(project)}"
        query = {"sha": sha, "order_by": "id", "sort": "desc", "per_page": PER_PAGE}
        listing = await self._http.call(f"GET {base}/pipelines", lambda: self._http.get(f"{base}/pipelines", query))
        checks: list[Check] = []
        for pipeline in newest_pipelines(listing.data):
            path = f"{base}/pipelines/{int(pipeline['id'])}/jobs"
            page = await self._http.call(f"GET {path}", partial(self._http.get, path, {"per_page": PER_PAGE}))
            checks += job_checks(page.data)
        return CiReport(project, sha, tuple(checks))

    async def ci_log_tail(self, project: str, check: Check, lines: int) -> str | None:
        """The trace's last `lines` lines; None for a check that is no GitLab job or a 404."""
        if check.kind is not CheckKind.GITLAB_JOB:
            return None
        path = f"/projects/{project_ref(project)}/jobs/{quote(check.id, safe='')}/trace"
        tail = await self._http.call(f"GET {path}", lambda: self._http.tail(path, tail_budget(lines)))
        if tail is None:
            return None
        data, starts_mid_line = tail
        return last_lines(data, lines, starts_mid_line=starts_mid_line)

    async def ci_rerun(self, project: str, check: Check) -> bool:
        """Retry the job (GitLab makes a new job of the same name in the same pipeline).

        A retry that may have been applied (a 5xx, a timeout) is repeated only when the
        pipeline shows no newer job of that name, so one failure never runs a job twice.
        """
        if check.kind is not CheckKind.GITLAB_JOB or check.rerun_id is None:
            return False
        job_id = int(check.rerun_id)
        path = f"/projects/{project_ref(project)}/jobs/{job_id}/retry"

        def retry() -> bool:
            try:
                self._http.gl.projects.get(project, lazy=True).jobs.get(job_id, lazy=True).retry()
            except GitlabError as error:
                if error.response_code in _REFUSED:
                    return False
                raise
            return True

        return await self._http.create(f"POST {path}", retry, lambda: self._retried(project, job_id))

    async def _retried(self, project: str, job_id: int) -> bool | None:
        """True when a job newer than `job_id` with its name is in its pipeline; else None."""
        base = f"/projects/{project_ref(project)}"
        job: JSON = await self._http.call(
            f"GET {base}/jobs/:id", lambda: self._http.get(f"{base}/jobs/{job_id}", conditional=False).data
        )
        path = f"{base}/pipelines/{int((job.get('pipeline') or {}).get('id') or 0)}/jobs"
        jobs: list[JSON] = await self._http.call(
            f"GET {path}", lambda: self._http.get(path, {"per_page": PER_PAGE}, conditional=False).data
        )
        newer = [other for other in jobs if other.get("name") == job.get("name") and int(other["id"]) > job_id]
        return True if newer else None

    async def mark_change_ready(self, project: str, number: int) -> None:
        """Take the draft marks off the MR's title (what GitLab's "Mark as ready" does)."""
        path = f"/projects/{project_ref(project)}/merge_requests/{number}"
        data: JSON = (await self._http.call(f"GET {path}", lambda: self._http.get(path))).data
        title = str(data.get("title") or "")
        ready = ready_title(title)
        if ready == title or not ready.strip():  # not a draft, or nothing but the mark
            return
        fields: dict[str, Any] = {"title": neutralise_quick_actions(ready)}

        def update() -> None:
            self._http.gl.projects.get(project, lazy=True).mergerequests.update(number, fields)

        await self._http.call(f"PUT {path}", update)

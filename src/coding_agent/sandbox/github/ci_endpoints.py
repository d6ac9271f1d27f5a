"""The GitHub testing server's endpoints of CI: check runs and their annotations, the
combined commit status, Actions jobs, their logs, re-runs of failed jobs, and the one
GraphQL mutation the agent needs (`markPullRequestReadyForReview`: REST cannot).

A job's log is what GitHub serves: a 302 to a short-lived signed blob URL (outside the
API: no token, no rate limit), where a `Range` header is honoured with a 206, so a
client can read the tail of a 50 MB log without downloading it.
"""

from __future__ import annotations

import hashlib
import hmac
import re
import secrets
import time
from typing import Any

from starlette.requests import Request
from starlette.responses import JSONResponse, RedirectResponse, Response

from coding_agent.sandbox.github.ci import RerunRefused
from coding_agent.sandbox.github.endpoints import Endpoints, read_body
from coding_agent.sandbox.github.http import ApiError, json_reply, paginate
from coding_agent.sandbox.github.records import CheckRunRecord, RepoRecord
from coding_agent.sandbox.github.render_accounts import node_id
from coding_agent.sandbox.github.state import GitHubState, NotFoundError

__all__ = ["CiEndpoints", "BLOB_PREFIX"]

# Where the signed log URLs point; the middleware lets these through without a token.
BLOB_PREFIX = "/_blobs/"
# GitHub's log links expire after a minute.
_BLOB_LIFETIME = 60.0
_RANGE = re.compile(r"^bytes=(\d*)-(\d*)$")
_READY_MUTATION = re.compile(r"markPullRequestReadyForReview\s*\(\s*input\s*:\s*\{\s*pullRequestId\s*:\s*(\$\w+|\"[^\"]*\")")


def _byte_range(header: str, size: int) -> tuple[int, int] | None:
    """(start, end exclusive) of one `bytes=a-b`, `bytes=a-` or `bytes=-n` range; None: unsatisfiable."""
    match = _RANGE.match(header.strip())
    if match is None or match.groups() == ("", ""):
        return None
    first, last = match.groups()
    if not first:
        start, end = max(size - int(last), 0), size
    else:
        start, end = int(first), min(int(last) + 1, size) if last else size
    return (start, end) if start < end else None


class CiEndpoints(Endpoints):
    """Check runs, statuses, Actions jobs and logs, re-runs, and marking a draft ready."""

    def __init__(self, state: GitHubState) -> None:
        super().__init__(state)
        self._blob_key = secrets.token_bytes(16)

    def _commit(self, request: Request, repo: RepoRecord) -> str:
        ref = request.path_params["ref"]
        sha = self.state.resolve_commit(repo.full_name, ref)
        if sha is None:
            raise ApiError(422, f"No commit found for SHA: {ref}")
        return sha

    def _job(self, request: Request, repo: RepoRecord) -> CheckRunRecord:
        job = self.state.check_run(repo.full_name, request.path_params["job_id"])
        if not job.is_actions_job:
            raise NotFoundError(str(job.id))
        return job

    # ------------------------------------------------------------ check runs and statuses

    async def list_check_runs(self, request: Request) -> Response:
        repo = self._repo(request)
        sha = self._commit(request, repo)
        params = request.query_params
        checks = self.state.check_runs(repo.full_name, sha, latest=params.get("filter", "latest") != "all")
        if params.get("check_name"):
            checks = [c for c in checks if c.name == params["check_name"]]
        if params.get("status"):
            checks = [c for c in checks if c.status == params["status"]]
        page, link = paginate(request, checks)
        render = self._render(request)
        pulls = render.ci_pulls(repo.full_name, sha)
        payload = {"total_count": len(checks), "check_runs": [render.check_run(c, pulls) for c in page]}
        return json_reply(request, payload, link=link)

    async def get_check_run(self, request: Request) -> Response:
        repo = self._repo(request)
        check = self.state.check_run(repo.full_name, request.path_params["check_id"])
        return json_reply(request, self._render(request).check_run(check))

    async def list_annotations(self, request: Request) -> Response:
        repo = self._repo(request)
        check = self.state.check_run(repo.full_name, request.path_params["check_id"])
        page, link = paginate(request, check.annotations)
        render = self._render(request)
        return json_reply(request, [render.annotation(check, a) for a in page], link=link)

    async def combined_status(self, request: Request) -> Response:
        repo = self._repo(request)
        sha = self._commit(request, repo)
        statuses = self.state.statuses(repo.full_name, sha)
        page, link = paginate(request, statuses)
        return json_reply(request, self._render(request).combined_status(repo.full_name, sha, statuses, page), link=link)

    # ------------------------------------------------------------ Actions jobs, logs, re-runs

    async def get_job(self, request: Request) -> Response:
        repo = self._repo(request)
        return json_reply(request, self._render(request).job(self._job(request, repo)))

    def _signature(self, path: str, expires: str) -> str:
        return hmac.new(self._blob_key, f"{path}\n{expires}".encode(), hashlib.sha256).hexdigest()

    async def job_logs(self, request: Request) -> Response:
        """302 to the log's signed blob URL; 404 while the job runs or when its log is gone."""
        repo = self._repo(request)
        job = self._job(request, repo)
        if job.status != "completed" or job.log is None:
            raise NotFoundError(str(job.id))
        path = f"{BLOB_PREFIX}job-logs/{repo.full_name}/{job.id}"
        expires = str(int(time.time() + _BLOB_LIFETIME))
        base = str(request.base_url).rstrip("/")
        location = f"{base}{path}?expires={expires}&sig={self._signature(path, expires)}"
        return RedirectResponse(location, status_code=302)

    async def job_log_blob(self, request: Request) -> Response:
        """The log's bytes, or the part a `Range` header asks for (206; 416 when unsatisfiable)."""
        expires = request.query_params.get("expires", "")
        signature = request.query_params.get("sig", "")
        valid = hmac.compare_digest(signature, self._signature(request.url.path, expires))
        if not valid or not expires.isdigit() or int(expires) < time.time():
            return Response(b"AuthenticationFailed", status_code=403, media_type="text/plain")
        owner, name = request.path_params["owner"], request.path_params["repo"]
        job = self.state.check_run(f"{owner}/{name}", request.path_params["job_id"])
        data = job.log or b""
        header = request.headers.get("range")
        if header is None:
            return Response(data, media_type="text/plain; charset=utf-8")
        wanted = _byte_range(header, len(data))
        if wanted is None:
            return Response(b"", status_code=416, headers={"Content-Range": f"bytes */{len(data)}"})
        start, end = wanted
        headers = {"Content-Range": f"bytes {start}-{end - 1}/{len(data)}", "Accept-Ranges": "bytes"}
        return Response(data[start:end], status_code=206, headers=headers, media_type="text/plain; charset=utf-8")

    async def rerun_failed_jobs(self, request: Request) -> Response:
        repo = self._repo(request)
        self._require(request, repo, "write")
        try:
            self.state.rerun_failed_jobs(repo.full_name, request.path_params["run_id"])
        except RerunRefused as refused:
            raise ApiError(403, str(refused)) from None
        return json_reply(request, {}, status=201)

    # ------------------------------------------------------------ GraphQL

    async def graphql(self, request: Request) -> Response:
        """Only `markPullRequestReadyForReview`; any other query gets GraphQL's error answer."""
        body = await read_body(request)
        query = body.get("query") if isinstance(body, dict) else None
        variables = body.get("variables") or {} if isinstance(body, dict) else {}
        match = _READY_MUTATION.search(query) if isinstance(query, str) else None
        if match is None or not isinstance(variables, dict):
            return _graphql_error("NOT_SUPPORTED", "the sandbox answers only markPullRequestReadyForReview")
        given = match.group(1)
        pull_id = variables.get(given[1:]) if given.startswith("$") else given.strip('"')
        for pull in self.state.issues():
            if pull.is_pull and node_id("PR", pull.pull_id or pull.id) == pull_id:
                break
        else:
            return _graphql_error("NOT_FOUND", f"Could not resolve to a node with the global id of '{pull_id}'")
        if not self.state.can(pull.repo, request.state.login, "write"):
            return _graphql_error("FORBIDDEN", f"{request.state.login} does not have permission to update {pull.repo}")
        ready = self.state.set_draft(pull.repo, pull.number, False)
        data = {"pullRequest": {"id": pull_id, "number": ready.number, "isDraft": ready.draft}}
        return JSONResponse({"data": {"markPullRequestReadyForReview": data}})


def _graphql_error(kind: str, message: str) -> Response:
    errors: list[dict[str, Any]] = [{"type": kind, "path": ["markPullRequestReadyForReview"], "message": message}]
    return JSONResponse({"data": None, "errors": errors})

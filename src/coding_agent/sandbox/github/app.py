"""The Starlette app of the GitHub testing server: REST v3 endpoints over a `GitHubState`.

Only the endpoints the agent uses, but each with GitHub's real shape, status codes and
headers, so that githubkit parses every answer unmodified and the adapter is tested
against the same protocol it meets in production.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.middleware import Middleware
from starlette.middleware.gzip import GZipMiddleware
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from coding_agent.sandbox.faults import FaultInjector
from coding_agent.sandbox.github.app_endpoints import AppEndpoints
from coding_agent.sandbox.github.ci_endpoints import BLOB_PREFIX, CiEndpoints
from coding_agent.sandbox.github.http import ApiError, GitHubMiddleware, api_error_response
from coding_agent.sandbox.github.issue_endpoints import IssueEndpoints
from coding_agent.sandbox.github.pull_endpoints import PullEndpoints
from coding_agent.sandbox.github.state import GitHubState, NotFoundError, ValidationFailed

__all__ = ["create_github_app"]

Endpoint = Callable[[Request], Any]


class _Api(IssueEndpoints, PullEndpoints, CiEndpoints, AppEndpoints):
    """The endpoints (endpoints.py and its parts: issues, pulls, CI); each reads
    `request.state.login`, set by the middleware."""


def _routes(api: _Api) -> list[Route]:
    repo = "/repos/{owner}/{repo}"
    issue = repo + "/issues/{number:int}"
    pull = repo + "/pulls/{number:int}"
    return [
        Route("/user", api.get_user, methods=["GET"]),
        Route("/app", api.get_app, methods=["GET"]),
        Route("/app/installations", api.list_installations, methods=["GET"]),
        Route("/app/installations/{installation_id:int}/access_tokens", api.create_installation_token, methods=["POST"]),
        Route("/installation/repositories", api.installation_repositories, methods=["GET"]),
        Route("/app-manifests/{code}/conversions", api.convert_manifest, methods=["POST"]),
        Route("/users/{username}", api.get_user_by_name, methods=["GET"]),
        Route("/search/issues", api.search_issues, methods=["GET"]),
        Route(repo, api.get_repo, methods=["GET"]),
        Route(repo + "/contents/{path:path}", api.get_contents, methods=["GET"]),
        Route(repo + "/issues", api.create_issue, methods=["POST"]),
        Route(repo + "/issues/comments/{comment_id:int}", api.get_comment, methods=["GET"]),
        Route(repo + "/issues/comments/{comment_id:int}", api.update_comment, methods=["PATCH"]),
        Route(issue, api.get_issue, methods=["GET"]),
        Route(issue, api.update_issue, methods=["PATCH"]),
        Route(issue + "/comments", api.list_comments, methods=["GET"]),
        Route(issue + "/comments", api.create_comment, methods=["POST"]),
        Route(issue + "/labels", api.list_issue_labels, methods=["GET"]),
        Route(issue + "/labels", api.add_issue_labels, methods=["POST"]),
        Route(issue + "/labels/{name:path}", api.remove_issue_label, methods=["DELETE"]),
        Route(issue + "/assignees", api.add_assignees, methods=["POST"]),
        Route(issue + "/assignees", api.remove_assignees, methods=["DELETE"]),
        Route(issue + "/events", api.list_events, methods=["GET"]),
        Route(repo + "/labels", api.list_repo_labels, methods=["GET"]),
        Route(repo + "/labels", api.create_repo_label, methods=["POST"]),
        Route(repo + "/labels/{name:path}", api.get_repo_label, methods=["GET"]),
        Route(repo + "/collaborators/{username}/permission", api.get_permission, methods=["GET"]),
        Route(repo + "/pulls", api.list_pulls, methods=["GET"]),
        Route(repo + "/pulls", api.create_pull, methods=["POST"]),
        Route(pull, api.get_pull, methods=["GET"]),
        Route(pull, api.update_pull, methods=["PATCH"]),
        Route(pull + "/comments", api.list_review_comments, methods=["GET"]),
        Route(pull + "/comments/{comment_id:int}/replies", api.reply_review_comment, methods=["POST"]),
        Route(repo + "/commits/{ref:path}/check-runs", api.list_check_runs, methods=["GET"]),
        Route(repo + "/commits/{ref:path}/status", api.combined_status, methods=["GET"]),
        Route(repo + "/check-runs/{check_id:int}", api.get_check_run, methods=["GET"]),
        Route(repo + "/check-runs/{check_id:int}/annotations", api.list_annotations, methods=["GET"]),
        Route(repo + "/actions/jobs/{job_id:int}", api.get_job, methods=["GET"]),
        Route(repo + "/actions/jobs/{job_id:int}/logs", api.job_logs, methods=["GET"]),
        Route(repo + "/actions/runs/{run_id:int}/rerun-failed-jobs", api.rerun_failed_jobs, methods=["POST"]),
        Route(BLOB_PREFIX + "job-logs/{owner}/{repo}/{job_id:int}", api.job_log_blob, methods=["GET"]),
        Route("/graphql", api.graphql, methods=["POST"]),
    ]


async def _api_error(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, ApiError)
    return api_error_response(exc.status, exc.message, exc.errors)


async def _not_found(request: Request, exc: Exception) -> Response:
    return api_error_response(404, "Not Found")


async def _validation_failed(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, ValidationFailed)
    error: dict[str, Any] = {"resource": exc.resource, "code": exc.code, "message": str(exc)}
    if exc.field:
        error["field"] = exc.field
    return api_error_response(422, "Validation Failed", [error])


async def _http_error(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, HTTPException)
    message = "Not Found" if exc.status_code == 404 else str(exc.detail)
    return api_error_response(exc.status_code, message)


def create_github_app(state: GitHubState, faults: FaultInjector | None = None, compress: bool = False) -> Starlette:
    """The ASGI app serving `state`; `faults` (if given) is consulted before routing.
    `compress`: answers of 1 kB and more are gzipped for a client that accepts it, as
    api.github.com sends them (the client then keeps and revalidates encoded bodies)."""
    gzip = [Middleware(GZipMiddleware, minimum_size=1024)] if compress else []
    return Starlette(
        routes=_routes(_Api(state)),
        middleware=[*gzip, Middleware(GitHubMiddleware, state=state, faults=faults, unauthenticated=BLOB_PREFIX)],
        exception_handlers={
            ApiError: _api_error,
            NotFoundError: _not_found,
            ValidationFailed: _validation_failed,
            HTTPException: _http_error,
        },
    )

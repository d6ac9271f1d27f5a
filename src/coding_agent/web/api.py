"""The dashboard's JSON API (SPEC 11.3): the same data as the pages, and the pause,
resume and stop actions through the same code as the CLI (`runtime.operator_actions`).

Store calls are short blocking transactions; they run in a thread so the event loop
that also works tasks never waits on the database.
"""

from __future__ import annotations

import json
import logging
from typing import cast

from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from coding_agent.domain.tasks import TaskKey
from coding_agent.redaction import Redactor
from coding_agent.runtime.budgets import Budgets
from coding_agent.runtime.operator_actions import Action, UnknownTask, apply_action
from coding_agent.store.state import StateStore
from coding_agent.web.activity import RunActivity
from coding_agent.web.feed import ListFeed
from coding_agent.web.request_body import MAX_FORM_BYTES, BodyReader, Refusal
from coding_agent.web.views import TaskFilter, UnknownFilter, task_detail, task_list, usage

__all__ = ["api_routes", "ACTIONS"]

ACTIONS = ("pause", "resume", "stop")

log = logging.getLogger(__name__)


def _not_canonical(key: str) -> Response | None:
    """A 400 naming `key` (and one log line) when it is no canonical task key: the
    dashboard reads keys with the one parser every route uses (SPEC 15)."""
    try:
        TaskKey.parse(key)
    except ValueError as error:
        log.warning("dashboard: refused: %s", error)
        return JSONResponse({"error": str(error)}, status_code=400)
    return None


def api_routes(
    store: StateStore,
    redactor: Redactor,
    activity: RunActivity | None = None,
    feed: ListFeed | None = None,
    budgets: Budgets | None = None,
    reader: BodyReader | None = None,
) -> list[Route]:
    """`feed`: the task list shared with the pages (one of its own by default); `budgets`:
    the daily budgets whose use and what is left `/api/usage` shows too; `reader`: the
    process's body reader (without a token the actions are reached before anyone is
    known, SPEC 15), one of their own by default."""
    feed = feed or ListFeed(lambda: task_list(store, redactor, activity))
    reader = reader or BodyReader()

    async def tasks(request: Request) -> Response:
        try:
            only = TaskFilter.of(dict(request.query_params))
        except UnknownFilter as error:
            return JSONResponse({"error": str(error)}, status_code=400)
        rows = await feed.rows()
        # Encoded in a worker thread: with thousands of tasks the encoding alone would
        # hold the event loop that also works tasks.
        body = await run_in_threadpool(lambda: json.dumps({"tasks": [row for row in rows if only.admits(row)]}).encode())
        return Response(body, media_type="application/json")

    async def task(request: Request) -> Response:
        key = request.path_params["key"]
        if (refused := _not_canonical(key)) is not None:
            return refused
        detail = await run_in_threadpool(task_detail, store, key, redactor, activity)
        if detail is None:
            return JSONResponse({"error": f"no task {key}"}, status_code=404)
        return JSONResponse(detail)

    async def usage_view(request: Request) -> Response:
        return JSONResponse(await run_in_threadpool(usage, store, budgets))

    async def act(request: Request) -> Response:
        # The action takes no parameters, but a body there must be what the guard in front
        # let through as `application/json` (web/same_origin.py): JSON, or nothing.
        key = request.path_params["key"]
        if (refused := _not_canonical(key)) is not None:
            return refused
        try:
            body = await reader.read(request, MAX_FORM_BYTES)
        except Refusal as refusal:
            return JSONResponse({"error": refusal.message}, status_code=refusal.status, headers={"Connection": "close"})
        if not _empty_or_json(body):
            return JSONResponse({"error": "the request body is not JSON"}, status_code=400)
        action = request.url.path.rsplit("/", 1)[1]
        try:
            result = await run_in_threadpool(apply_action, store, key, cast(Action, action))  # the route names one
        except UnknownTask as error:
            return JSONResponse({"error": str(error)}, status_code=404)
        return JSONResponse({"task": key, "action": action, "message": result.message})

    return [
        Route("/api/tasks", tasks, methods=["GET"]),
        Route("/api/usage", usage_view, methods=["GET"]),
        *(Route(f"/api/tasks/{{key:path}}/{name}", act, methods=["POST"], name=f"api-{name}") for name in ACTIONS),
        Route("/api/tasks/{key:path}", task, methods=["GET"]),
    ]


def _empty_or_json(body: bytes) -> bool:
    if not body.strip():
        return True
    try:
        json.loads(body)
    except ValueError:
        return False
    return True

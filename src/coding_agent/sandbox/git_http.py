"""Real git repositories for the sandbox forges, served over smart HTTP.

The agent clones and pushes with the real `git` client, so the sandbox forges must speak
the real protocol: this module serves the bare repositories of `git_store.py`
(`GitRepoStore`) with `git http-backend` run as a CGI program (`GitHttpBackend`).
`GitHttpRouter` puts the git paths (`/<repo>.git/info/refs`, `/git-upload-pack`,
`/git-receive-pack`) in front of a forge's API app on the same port, as GitHub and GitLab
serve clone URLs next to their web UI.

Authentication is the forge's token, given either as HTTP Basic (any user name, the
token as the password: what `git` sends from a credential helper or an `extraHeader`)
or as `Authorization: Bearer <token>`. Each forge decides who may read and who may push
through its `GitAuthorizer`.
"""

from __future__ import annotations

import asyncio
import base64
import re
import subprocess
import tempfile
from collections.abc import Callable
from pathlib import Path

from starlette.requests import Request
from starlette.responses import PlainTextResponse, Response
from starlette.types import ASGIApp, Receive, Scope, Send

from coding_agent.sandbox.faults import FaultInjector
from coding_agent.sandbox.git_store import GitRepoStore, GitRequestRecord, sandbox_git_env

__all__ = [
    "GitHttpBackend",
    "GitHttpRouter",
    "GitAccessDenied",
    "GitAuthorizer",
    "is_git_path",
    "token_from_authorization",
    "git_client",
]

# `/<owner>/<repo>.git/<service>`; GitLab repositories may sit in nested groups.
_GIT_PATH = re.compile(r"^/(?P<repo>[^?]+?)\.git/(?P<service>info/refs|git-upload-pack|git-receive-pack)$")


class GitAccessDenied(Exception):
    """A forge's answer to a git request it will not serve: 401, 403 or 404 (`user` if known)."""

    def __init__(self, status: int, message: str, user: str | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.user = user


# (repository as named in the URL, token or None, is a push) -> (store name, user name).
# Raises GitAccessDenied. The store name is the repository's canonical name.
GitAuthorizer = Callable[[str, str | None, bool], tuple[str, str]]


def is_git_path(path: str) -> bool:
    return _GIT_PATH.match(path) is not None


def token_from_authorization(header: str) -> str | None:
    """The token of `Basic base64(user:token)`, `Bearer <token>` or `token <token>`."""
    scheme, _, value = header.strip().partition(" ")
    value = value.strip()
    if not value:
        return None
    if scheme.lower() in ("bearer", "token"):
        return value
    if scheme.lower() == "basic":
        try:
            decoded = base64.b64decode(value, validate=True).decode("utf-8")
        except (ValueError, UnicodeDecodeError):
            return None
        user, _, password = decoded.partition(":")
        return password or user or None
    return None


def _cgi_response(output: bytes) -> Response:
    """Turn `git http-backend`'s CGI output (headers, blank line, body) into a response."""
    for separator in (b"\r\n\r\n", b"\n\n"):
        head, found, body = output.partition(separator)
        if found:
            break
    else:
        return PlainTextResponse("git http-backend gave no headers", status_code=500)
    status = 200
    headers: dict[str, str] = {}
    for line in head.decode("latin-1").splitlines():
        key, _, value = line.partition(":")
        if key.lower() == "status":
            status = int(value.strip().split(" ", 1)[0])
        elif key:
            headers[key.strip()] = value.strip()
    headers.pop("Content-Length", None)
    return Response(body, status_code=status, headers=headers)


class GitHttpBackend:
    """ASGI app answering smart-HTTP git requests from a `GitRepoStore`.

    `authorize` is the forge's permission check; `default_branch` names the branch a
    repository is created with when it is first cloned before any test seeded it.
    """

    def __init__(
        self,
        store: GitRepoStore,
        authorize: GitAuthorizer,
        default_branch: Callable[[str], str] = lambda name: "main",
    ) -> None:
        self.store = store
        self._authorize = authorize
        self._default_branch = default_branch

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        request = Request(scope, receive)
        response = await self._answer(request)
        await response(scope, receive, send)

    async def _answer(self, request: Request) -> Response:
        match = _GIT_PATH.match(request.url.path)
        if match is None:
            return PlainTextResponse("Not Found", status_code=404)
        service = match["service"]
        if service == "info/refs":
            service = request.query_params.get("service", "")
        push = service == "git-receive-pack"
        token = token_from_authorization(request.headers.get("authorization", ""))
        user: str | None = None
        name = match["repo"]
        try:
            name, user = self._authorize(match["repo"], token, push)
            if push and self.store.refuse_pushes:
                raise GitAccessDenied(403, "pushes are refused by this sandbox forge")
        except GitAccessDenied as denied:
            user = user or denied.user
            headers = {"WWW-Authenticate": 'Basic realm="sandbox forge"'} if denied.status == 401 else {}
            response: Response = PlainTextResponse(denied.message, status_code=denied.status, headers=headers)
        else:
            await asyncio.to_thread(self.store.ensure, name, self._default_branch(name))
            if push and request.method == "GET":
                await asyncio.to_thread(self.store.before_push, name)
            response = await self._cgi(request, name, match["service"], user)
        self.store.record(GitRequestRecord(request.method, name, service, response.status_code, user))
        return response

    async def _cgi(self, request: Request, name: str, service_path: str, user: str) -> Response:
        body = await request.body()
        env = {
            **sandbox_git_env(self.store.root),
            "GIT_PROJECT_ROOT": str(self.store.root),
            "GIT_HTTP_EXPORT_ALL": "1",
            "PATH_INFO": f"/{name}.git/{service_path}",
            "REQUEST_METHOD": request.method,
            "QUERY_STRING": request.url.query,
            "CONTENT_TYPE": request.headers.get("content-type", ""),
            "CONTENT_LENGTH": str(len(body)),
            "REMOTE_USER": user,
            "REMOTE_ADDR": request.client.host if request.client else "127.0.0.1",
        }
        for header, variable in (("git-protocol", "HTTP_GIT_PROTOCOL"), ("content-encoding", "HTTP_CONTENT_ENCODING")):
            if header in request.headers:
                env[variable] = request.headers[header]
        process = await asyncio.create_subprocess_exec(
            "git",
            "http-backend",
            env=env,
            stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
        )
        output, errors = await process.communicate(body)
        if process.returncode != 0 and not output:
            return PlainTextResponse(errors.decode(errors="replace") or "git http-backend failed", status_code=500)
        return _cgi_response(output)


def git_client(
    cwd: Path | None, *args: str, token: str | None = None, check: bool = True
) -> subprocess.CompletedProcess[str]:
    """Run the real git client as a forge user would (tests: "clone it afresh and look").

    No operator config, a fixed identity, and the token (if any) as an HTTP Basic header
    given through the environment.
    """
    env = sandbox_git_env(cwd or Path(tempfile.gettempdir()))
    if token is not None:
        basic = base64.b64encode(f"x-access-token:{token}".encode()).decode()
        env.update({"GIT_CONFIG_COUNT": "1", "GIT_CONFIG_KEY_0": "http.extraHeader"})
        env["GIT_CONFIG_VALUE_0"] = f"Authorization: Basic {basic}"
    return subprocess.run(["git", *args], cwd=cwd, env=env, capture_output=True, text=True, check=check)


class GitHttpRouter:
    """Send git paths to `git` and everything else to `api`; `faults` apply to git paths too.

    Git requests bypass the API app's middleware (its request log, its rate limit), as
    GitHub's git hosts are separate from api.github.com.
    """

    def __init__(self, api: ASGIApp, git: GitHttpBackend, faults: FaultInjector | None = None) -> None:
        self.api = api
        self.git = git
        self.faults = faults

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and is_git_path(scope["path"]):
            if self.faults is not None:
                fault = await self.faults.apply(Request(scope, receive))
                if fault is not None:
                    await fault(scope, receive, send)
                    return
            await self.git(scope, receive, send)
            return
        await self.api(scope, receive, send)

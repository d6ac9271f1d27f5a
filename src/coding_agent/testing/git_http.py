"""Real git repositories for the sandbox forges, served over smart HTTP.

The agent clones and pushes with the real `git` client, so the sandbox forges must speak
the real protocol: this module keeps bare repositories in a temporary directory
(`GitRepoStore`) and serves them with `git http-backend` run as a CGI program
(`GitHttpBackend`). `GitHttpRouter` puts the git paths (`/<repo>.git/info/refs`,
`/git-upload-pack`, `/git-receive-pack`) in front of a forge's API app on the same port,
as GitHub and GitLab serve clone URLs next to their web UI.

Authentication is the forge's token, given either as HTTP Basic (any user name, the
token as the password: what `git` sends from a credential helper or an `extraHeader`)
or as `Authorization: Bearer <token>`. Each forge decides who may read and who may push
through its `GitAuthorizer`.

Tests get two controls beyond the forge's permissions: `refuse_pushes` makes every push
answer 403, and `race_next_push` lands someone else's commit on a branch just before the
agent's next push, so a non-fast-forward rejection happens deterministically.
"""

from __future__ import annotations

import asyncio
import base64
import os
import re
import shutil
import subprocess
import tempfile
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path

from starlette.requests import Request
from starlette.responses import PlainTextResponse, Response
from starlette.types import ASGIApp, Receive, Scope, Send

from coding_agent.testing.faults import FaultInjector

__all__ = [
    "Files",
    "GitRepoStore",
    "GitHttpBackend",
    "GitHttpRouter",
    "GitAccessDenied",
    "GitAuthorizer",
    "GitRequestRecord",
    "is_git_path",
    "token_from_authorization",
    "git_client",
]

# `/<owner>/<repo>.git/<service>`; GitLab repositories may sit in nested groups.
_GIT_PATH = re.compile(r"^/(?P<repo>[^?]+?)\.git/(?P<service>info/refs|git-upload-pack|git-receive-pack)$")
_REPO_NAME = re.compile(r"^[A-Za-z0-9_.-]+(?:/[A-Za-z0-9_.-]+)+$")
_SANDBOX_IDENTITY = {
    "GIT_AUTHOR_NAME": "Sandbox Forge",
    "GIT_AUTHOR_EMAIL": "sandbox@example.test",
    "GIT_COMMITTER_NAME": "Sandbox Forge",
    "GIT_COMMITTER_EMAIL": "sandbox@example.test",
}

Files = Mapping[str, str | bytes]


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


@dataclass(frozen=True)
class GitRequestRecord:
    """One git HTTP request as answered, for tests that count clones and pushes."""

    method: str
    repo: str
    service: str
    status: int
    user: str | None


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


def _git_env(home: Path) -> dict[str, str]:
    """The sandbox's own git runs: no operator config, a fixed identity, no prompts."""
    return {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "HOME": str(home),
        "GIT_CONFIG_NOSYSTEM": "1",
        "GIT_CONFIG_GLOBAL": os.devnull,
        "GIT_TERMINAL_PROMPT": "0",
        "LC_ALL": "C",
        **_SANDBOX_IDENTITY,
    }


def _fast_import_stream(ref: str, parent: str | None, files: Files, message: str, when: int) -> bytes:
    """A `git fast-import` stream of one commit on `ref` (on top of `parent`) holding `files`."""
    out = bytearray()
    data = message.encode()
    out += f"commit {ref}\n".encode()
    committer = f"{_SANDBOX_IDENTITY['GIT_COMMITTER_NAME']} <{_SANDBOX_IDENTITY['GIT_COMMITTER_EMAIL']}>"
    out += f"committer {committer} {when} +0000\n".encode()
    out += f"data {len(data)}\n".encode() + data + b"\n"
    if parent is not None:
        out += f"from {parent}\n".encode()
    for path, content in files.items():
        if not path or path.startswith("/") or ".." in path.split("/") or "\n" in path:
            raise ValueError(f"not a repository-relative file path: {path!r}")
        blob = content.encode() if isinstance(content, str) else bytes(content)
        out += f"M 100644 inline {path}\n".encode()
        out += f"data {len(blob)}\n".encode() + blob + b"\n"
    return bytes(out)


class GitRepoStore:
    """Bare repositories on disk, named like the forge names them (`owner/repo`).

    The directory is created on first use and removed by `close()`. Every method is
    thread-safe: tests call it from their thread while the server answers git requests
    from its own.
    """

    def __init__(self) -> None:
        self._lock = threading.RLock()
        self._root: Path | None = None
        self._races: dict[tuple[str, str], Files] = {}
        self.refuse_pushes = False
        self.requests: list[GitRequestRecord] = []

    @property
    def root(self) -> Path:
        with self._lock:
            if self._root is None:
                self._root = Path(tempfile.mkdtemp(prefix="sandbox-git-"))
            return self._root

    def path(self, name: str) -> Path:
        """The bare repository's directory (it may not exist yet)."""
        if not _REPO_NAME.match(name) or ".." in name.split("/"):
            raise ValueError(f"not a repository name: {name!r}")
        return self.root / f"{name}.git"

    def exists(self, name: str) -> bool:
        return (self.path(name) / "HEAD").is_file()

    def _git(self, name: str, *args: str, stdin: bytes | None = None) -> str:
        result = subprocess.run(
            ["git", "--git-dir", str(self.path(name)), *args],
            input=stdin,
            capture_output=True,
            env=_git_env(self.root),
            check=False,
        )
        if result.returncode != 0:
            detail = result.stderr.decode(errors="replace").strip()
            raise RuntimeError(f"git {args[0]} in sandbox repository {name} failed: {detail}")
        return result.stdout.decode(errors="replace")

    def init(self, name: str, files: Files | None = None, branch: str = "main", message: str = "Initial commit") -> str:
        """Create `name` with one commit on `branch` holding `files` (default: a README).

        Returns the commit's sha. Raises ValueError if the repository exists already.
        """
        with self._lock:
            path = self.path(name)
            if self.exists(name):
                raise ValueError(f"sandbox repository {name} exists already")
            path.mkdir(parents=True, exist_ok=True)
            self._git(name, "init", "--quiet", "--bare", f"--initial-branch={branch}")
            content = files if files is not None else {"README.md": f"# {name.rsplit('/', 1)[-1]}\n"}
            return self._commit(name, branch, content, message, parent=None)

    def ensure(self, name: str, branch: str = "main") -> Path:
        """The repository, created with a README commit on `branch` when it does not exist."""
        with self._lock:
            if not self.exists(name):
                self.init(name, branch=branch)
            return self.path(name)

    def _commit(self, name: str, branch: str, files: Files, message: str, parent: str | None) -> str:
        ref = f"refs/heads/{branch}"
        self._git(name, "fast-import", "--quiet", stdin=_fast_import_stream(ref, parent, files, message, int(time.time())))
        return self._git(name, "rev-parse", ref).strip()

    def commit_files(self, name: str, branch: str, files: Files, message: str = "Update files") -> str:
        """Add one commit on top of `branch` (created from nothing if absent); returns its sha."""
        with self._lock:
            parent = self.branches(name).get(branch)
            return self._commit(name, branch, files, message, parent=parent)

    def branches(self, name: str) -> dict[str, str]:
        """Branch name -> commit sha; empty for a repository that does not exist."""
        with self._lock:
            if not self.exists(name):
                return {}
            listing = self._git(name, "for-each-ref", "--format=%(refname:strip=2) %(objectname)", "refs/heads")
        return dict(line.split(" ", 1) for line in listing.splitlines() if line)  # type: ignore[misc]

    def create_branch(self, name: str, branch: str, start: str) -> str:
        """Point a new `branch` at `start` (a branch name or sha); returns the sha."""
        with self._lock:
            sha = self._git(name, "rev-parse", "--verify", f"{start}^{{commit}}").strip()
            self._git(name, "update-ref", f"refs/heads/{branch}", sha, "")
            return sha

    def read_file(self, name: str, ref: str, path: str) -> bytes | None:
        """The file at `path` in `ref`, or None when it is not there."""
        result = subprocess.run(
            ["git", "--git-dir", str(self.path(name)), "cat-file", "blob", f"{ref}:{path}"],
            capture_output=True,
            env=_git_env(self.root),
            check=False,
        )
        return result.stdout if result.returncode == 0 else None

    def changed_files(self, name: str, base: str, head: str) -> list[str]:
        """Paths `head` changed since it forked from `base` (what a PR's "Files changed" lists)."""
        return self._git(name, "diff", "--name-only", f"{base}...{head}").split()

    def log(self, name: str, ref: str) -> list[str]:
        """Full commit messages reachable from `ref`, newest first."""
        out = self._git(name, "log", "--format=%B%x00", ref)
        return [message.strip() for message in out.split("\x00") if message.strip()]

    def race_next_push(self, name: str, branch: str, files: Files | None = None) -> None:
        """Before the next push to `name`, commit `files` on `branch` as somebody else.

        Makes "the branch moved on the forge while the agent worked" deterministic: that
        push is then rejected as non-fast-forward by git itself.
        """
        with self._lock:
            self._races[(name, branch)] = files or {"RACE.md": "pushed by someone else\n"}

    def before_push(self, name: str) -> None:
        """Called by the server when a push starts: land any commit armed by `race_next_push`."""
        with self._lock:
            armed = [(key, files) for key, files in self._races.items() if key[0] == name]
            for key, files in armed:
                del self._races[key]
                self.commit_files(name, key[1], files, "A commit pushed by someone else")

    def record(self, entry: GitRequestRecord) -> None:
        with self._lock:
            self.requests.append(entry)

    def close(self) -> None:
        with self._lock:
            if self._root is not None:
                shutil.rmtree(self._root, ignore_errors=True)
                self._root = None


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
            **_git_env(self.store.root),
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
    env = _git_env(cwd or Path(tempfile.gettempdir()))
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

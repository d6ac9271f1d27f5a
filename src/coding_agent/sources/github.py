"""The GitHub task source: githubkit over the REST API, behind the `Source` protocol.

Two choices worth knowing:

- githubkit's own HTTP cache (hishel) is off: it dropped the request timeout. The shared
  `CachingTransport` (sources/http.py) does its job instead: every GET revalidates with
  `If-None-Match`, and GitHub answers 304 (free of rate limit) when nothing changed, so
  assignees, labels and comments are always fresh, yet a steering checkpoint that finds
  nothing new costs only 304s (SPEC 8.1, 13); and every request has a deadline. Each
  source has its own cache, never shared between tokens.
- Every call goes through `retry_async`: 5xx, 429, a rate-limit 403, timeouts and dropped
  connections become `TransientError` (with the server's wait hint); anything else is a
  `ForgeError` naming the method, path and status, never the token.
"""

from __future__ import annotations

import asyncio
import base64
import re
from collections.abc import Awaitable, Callable, Iterable
from datetime import datetime, timezone
from typing import Any, TypeVar
from urllib.parse import quote, urlsplit

import httpx
from githubkit import GitHub, Response
from githubkit.exception import RequestError, RequestFailed, RequestTimeout
from githubkit.utils import UNSET
from pydantic import ValidationError

from coding_agent.config import GitHubConfig, LabelConfig
from coding_agent.domain.delivery import ChangeRequest, GitIdentity
from coding_agent.domain.tasks import Comment, Forge, Permission, Task, TaskKey, TaskKind, Thread
from coding_agent.errors import AgentError, ForgeError, TransientError
from coding_agent.redaction import Redactor
from coding_agent.retry import RetryPolicy, retry_async
from coding_agent.sources.http import CachingTransport, rate_limited, retry_after, transient_status
from coding_agent.sources.writes import cap_body, has_marker, marked, new_marker, strip_marker, write_once

__all__ = ["GitHubSource", "GitHubNotFoundError", "build_search_query", "MAX_SEARCH_QUERY_LENGTH"]

T = TypeVar("T")
Sleep = Callable[[float], Awaitable[None]]

PER_PAGE = 100
# GitHub refuses (422) a comment or PR body longer than this, and a title over 256.
MAX_BODY_LENGTH = 65_536
MAX_TITLE_LENGTH = 256
# GitHub refuses a search `q` longer than this (422).
MAX_SEARCH_QUERY_LENGTH = 256
# GitHub serves at most 1000 search results (10 pages of 100).
_MAX_SEARCH_PAGES = 10
_NEXT_LINK = re.compile(r'<[^>]*>\s*;\s*rel="next"')

_ROLE_PERMISSIONS = {
    "admin": Permission.ADMIN,
    "maintain": Permission.WRITE,
    "write": Permission.WRITE,
    "triage": Permission.READ,
    "read": Permission.READ,
    "none": Permission.NONE,
}


class GitHubNotFoundError(ForgeError):
    """GitHub answered 404: the issue, label, comment or user does not exist (or is hidden)."""


def _given(value: Any) -> Any:
    """githubkit marks absent optional fields with UNSET; treat them as None."""
    return None if value is UNSET else value


def build_search_query(config: GitHubConfig) -> tuple[str, frozenset[str] | None]:
    """The one search `q` of a poll, and the repositories to keep when it had to widen.

    `repo:` qualifiers are OR-ed by GitHub, so one query covers every configured
    repository. When they would make `q` longer than GitHub accepts, the query asks for
    the owners' (`user:`) items instead and the returned set says which repositories to
    keep: still one query per poll, whatever the number of repositories.
    """
    repos = [repo if "/" in repo else f"{config.owner}/{repo}" for repo in config.repos]
    head = ["is:open", f'label:"{config.bot_label}"']
    tail = [f"assignee:{config.assignee}"] if config.assignee else []
    if config.query.strip():
        tail.append(config.query.strip())
    if not repos:
        return " ".join([*head, f"user:{config.owner}", *tail]), None
    query = " ".join([*head, *(f"repo:{repo}" for repo in repos), *tail])
    if len(query) <= MAX_SEARCH_QUERY_LENGTH:
        return query, None
    owners = sorted({repo.split("/", 1)[0] for repo in repos})
    return " ".join([*head, *(f"user:{owner}" for owner in owners), *tail]), frozenset(r.lower() for r in repos)


def _error_detail(response: httpx.Response) -> str:
    """GitHub's own `message` (and first error), shortened: it helps and holds no secret."""
    try:
        body = response.json()
    except ValueError:
        return ""
    if not isinstance(body, dict):
        return ""
    detail = str(body.get("message") or "")
    errors = body.get("errors")
    if isinstance(errors, list) and errors and isinstance(errors[0], dict):
        first = errors[0].get("message") or errors[0].get("code")
        if first:
            detail = f"{detail} ({first})"
    return detail[:200]


def _has_next_page(response: Response[Any], count: int) -> bool:
    """A `rel="next"` link, or a full page (in case a cached page kept an old Link)."""
    if count == 0:
        return False
    return bool(_NEXT_LINK.search(response.headers.get("link", ""))) or count >= PER_PAGE


def _split_project(project: str) -> tuple[str, str]:
    owner, _, repo = project.partition("/")
    return owner, repo


def _project_of(repository_url: str) -> str:
    """`.../repos/owner/name` (also under GitHub Enterprise's /api/v3) -> `owner/name`."""
    return "/".join(repository_url.rstrip("/").split("/")[-2:])


def _label_names(labels: Iterable[Any]) -> tuple[str, ...]:
    names = (label if isinstance(label, str) else _given(getattr(label, "name", None)) for label in labels)
    return tuple(name for name in names if name)


def _logins(users: Any) -> tuple[str, ...]:
    return tuple(user.login for user in (_given(users) or ()) if user is not None)


def _author(user: Any) -> str:
    # GitHub shows a deleted account as "ghost".
    return user.login if user is not None else "ghost"


def _comment(c: Any, thread_id: str | None = None) -> Comment:
    """An issue or review comment as the domain sees it: without our hidden marker."""
    return Comment(
        id=str(c.id),
        author=_author(_given(c.user)),
        body=strip_marker(_given(c.body) or ""),
        created_at=c.created_at,
        thread_id=thread_id,
    )


def _comment_id(comment_id: str) -> int:
    try:
        return int(comment_id)
    except ValueError:
        raise ForgeError(f"not a GitHub comment id: {comment_id!r}") from None


class GitHubSource:
    """A `Source` over one GitHub scope (`owner`, optional `repos`, extra `query`).

    `sleep` is what retries wait with (tests may record the waits); `timeout` bounds
    every HTTP request.
    """

    forge: Forge = "github"

    def __init__(
        self,
        config: GitHubConfig,
        retry: RetryPolicy,
        *,
        sleep: Sleep = asyncio.sleep,
        timeout: float = 30.0,
    ) -> None:
        self._config = config
        self.labels = LabelConfig.model_validate({name: getattr(config, name) for name in LabelConfig.model_fields})
        self.bot_name = config.bot_name
        self._retry = retry
        self._sleep = sleep
        self._token = config.token.get_secret_value() if config.token is not None else ""
        self._transport = CachingTransport(timeout)
        self._github: GitHub[Any] = GitHub(
            self._token or None,
            base_url=config.api_url,
            auto_retry=False,
            timeout=timeout,
            user_agent="coding-agent",
            http_cache=False,
            async_transport=self._transport,
        )
        self._known_labels: dict[str, set[str]] = {}

    # ------------------------------------------------------------ the request path

    def _redact(self, text: str) -> str:
        return Redactor([self._token] if self._token else []).text(text)

    def _failure(self, method: str, path: str, response: httpx.Response) -> AgentError:
        status, headers = response.status_code, response.headers
        what = f"github {method} {path}"
        if transient_status(status, headers):
            return TransientError(
                f"{what} failed: HTTP {status}",
                retry_after=retry_after(headers),
                maybe_applied=not rate_limited(status, headers),
            )
        detail = _error_detail(response)
        message = self._redact(f"{what} failed: HTTP {status}" + (f": {detail}" if detail else ""))
        return GitHubNotFoundError(message) if status == 404 else ForgeError(message)

    async def _attempt(self, method: str, path: str, send: Callable[[], Awaitable[Response[T]]]) -> Response[T]:
        """One REST request; githubkit's errors become ours."""
        what = f"github {method} {path}"
        try:
            return await send()
        except RequestFailed as error:
            raise self._failure(method, path, error.response.raw_response) from None
        except RequestTimeout:
            raise TransientError(f"{what} timed out") from None
        except RequestError as error:
            cause = type(error.exc).__name__
            if isinstance(error.exc, httpx.TransportError):
                raise TransientError(f"{what} failed: connection error ({cause})") from None
            raise ForgeError(f"{what} failed: {cause}") from None

    async def _call(self, method: str, path: str, send: Callable[[], Awaitable[Response[T]]]) -> Response[T]:
        """One REST call with the retry policy (for reads and idempotent writes)."""
        return await retry_async(
            lambda: self._attempt(method, path, send), self._retry, f"github {method} {path}", sleep=self._sleep
        )

    async def _create(
        self,
        path: str,
        send: Callable[[], Awaitable[Response[Any]]],
        find: Callable[[], Awaitable[Any | None]],
    ) -> Any:
        """A POST that creates something: retried only after `find` says it did not happen."""

        async def post() -> Any:
            return self._data(await self._attempt("POST", path, send), "POST", path)

        return await write_once(f"github POST {path}", post, find, self._retry, self._sleep)

    @staticmethod
    def _data(response: Response[T], method: str, path: str) -> T:
        try:
            return response.parsed_data
        except ValidationError:
            raise ForgeError(f"github {method} {path}: unexpected response shape") from None

    async def _get(self, path: str, send: Callable[[], Awaitable[Response[T]]]) -> T:
        return self._data(await self._call("GET", path, send), "GET", path)

    async def _get_pages(self, path: str, fetch: Callable[[int], Awaitable[Response[list[T]]]]) -> list[T]:
        """Every page of a list endpoint, 100 at a time, each page retried on its own."""
        items: list[T] = []
        page = 1
        while True:
            response = await self._call("GET", path, lambda number=page: fetch(number))  # type: ignore[misc]
            chunk = self._data(response, "GET", path)
            items.extend(chunk)
            if not _has_next_page(response, len(chunk)):
                return items
            page += 1

    # ------------------------------------------------------------ discovery and snapshots

    async def discover(self) -> list[Task]:
        return await self._search(*build_search_query(self._config))

    async def discover_followups(self, since: datetime) -> list[Task]:
        """One search: done items that @mention the bot, updated since `since`."""
        if not self.bot_name:
            return []
        stamp = since.astimezone(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
        query = f"{self._config.query} mentions:{self.bot_name} updated:>={stamp}".strip()
        scope = self._config.model_copy(update={"bot_label": self._config.done_label, "query": query})
        return await self._search(*build_search_query(scope))

    async def _search(self, query: str, keep: frozenset[str] | None) -> list[Task]:
        """Every page of one issue search (`keep`: the repositories to keep of a widened query)."""
        search = self._github.rest.search.async_issues_and_pull_requests
        tasks: list[Task] = []
        for page in range(1, _MAX_SEARCH_PAGES + 1):
            response = await self._call(
                "GET", "/search/issues", lambda number=page: search(q=query, per_page=PER_PAGE, page=number)  # type: ignore[misc]
            )
            result = self._data(response, "GET", "/search/issues")
            for item in result.items:
                project = _project_of(item.repository_url)
                if keep is not None and project.lower() not in keep:
                    continue
                kind = TaskKind.CHANGE if _given(item.pull_request) is not None else TaskKind.ISSUE
                task = self._task(project, kind, item)
                self._remember_labels(project, task.labels)
                tasks.append(task)
            if not _has_next_page(response, len(result.items)) or page * PER_PAGE >= result.total_count:
                break
        return tasks

    def _task(self, project: str, kind: TaskKind, item: Any, **extra: Any) -> Task:
        return Task(
            key=TaskKey("github", project, kind, item.number),
            title=item.title,
            body=_given(item.body) or "",
            author=_author(_given(item.user)),
            labels=_label_names(item.labels),
            assignees=_logins(item.assignees),
            url=item.html_url,
            created_at=item.created_at,
            updated_at=item.updated_at,
            state=str(item.state),
            **extra,
        )

    async def get_task(self, key: TaskKey) -> Task:
        owner, repo = _split_project(key.project)
        if not key.is_change:
            path = f"/repos/{key.project}/issues/{key.number}"
            issue = await self._get(path, lambda: self._github.rest.issues.async_get(owner, repo, key.number))
            task = self._task(key.project, key.kind, issue)
        else:
            path = f"/repos/{key.project}/pulls/{key.number}"
            pull = await self._get(path, lambda: self._github.rest.pulls.async_get(owner, repo, key.number))
            head_repo = _given(pull.head.repo)
            extra = {"head_sha": pull.head.sha, "draft": str(bool(_given(pull.draft)))}
            if head_repo is not None:
                extra["head_repo"] = head_repo.full_name
            task = self._task(
                key.project, key.kind, pull, head_branch=pull.head.ref, base_branch=pull.base.ref, extra=extra
            )
        self._remember_labels(key.project, task.labels)
        return task

    async def get_assignees(self, key: TaskKey) -> list[str]:
        owner, repo = _split_project(key.project)
        path = f"/repos/{key.project}/issues/{key.number}"
        issue = await self._get(path, lambda: self._github.rest.issues.async_get(owner, repo, key.number))
        return list(_logins(issue.assignees))

    async def get_authenticated_login(self) -> str:
        """The login the token belongs to (for `doctor`, or to learn the bot name)."""
        user = await self._get("/user", self._github.rest.users.async_get_authenticated)
        return user.login

    # ------------------------------------------------------------ comments and threads

    async def _raw_comments(self, key: TaskKey) -> list[Any]:
        owner, repo = _split_project(key.project)
        path = f"/repos/{key.project}/issues/{key.number}/comments"
        return await self._get_pages(
            path,
            lambda page: self._github.rest.issues.async_list_comments(
                owner, repo, key.number, per_page=PER_PAGE, page=page
            ),
        )

    async def list_comments(self, key: TaskKey) -> list[Comment]:
        result = [_comment(c) for c in await self._raw_comments(key)]
        return sorted(result, key=lambda c: (c.created_at, int(c.id)))

    async def list_threads(self, key: TaskKey) -> list[Thread]:
        if not key.is_change:
            return []
        review_comments = await self._raw_review_comments(key)
        review_comments.sort(key=lambda c: (c.created_at, c.id))
        present = {c.id for c in review_comments}
        grouped: dict[int, list[Any]] = {}
        for c in review_comments:
            parent = _given(c.in_reply_to_id)
            root = parent if parent in present else c.id
            grouped.setdefault(root, []).append(c)
        threads = []
        for root, members in grouped.items():
            first = members[0]
            comments = tuple(_comment(c, str(root)) for c in members)
            line = _given(first.line) or _given(first.original_line)
            threads.append(Thread(id=str(root), comments=comments, path=first.path, line=line))
        return threads

    async def post_comment(self, key: TaskKey, body: str) -> Comment:
        owner, repo = _split_project(key.project)
        path = f"/repos/{key.project}/issues/{key.number}/comments"
        marker = new_marker()
        text = marked(cap_body(body, MAX_BODY_LENGTH), marker)

        async def find() -> Any | None:
            return next((c for c in await self._raw_comments(key) if has_marker(_given(c.body), marker)), None)

        created = await self._create(
            path, lambda: self._github.rest.issues.async_create_comment(owner, repo, key.number, body=text), find
        )
        return _comment(created)

    async def edit_comment(self, key: TaskKey, comment_id: str, body: str) -> None:
        owner, repo = _split_project(key.project)
        number = _comment_id(comment_id)
        path = f"/repos/{key.project}/issues/comments/{number}"
        text = cap_body(body, MAX_BODY_LENGTH)
        await self._call(
            "PATCH", path, lambda: self._github.rest.issues.async_update_comment(owner, repo, number, body=text)
        )

    async def _raw_review_comments(self, key: TaskKey) -> list[Any]:
        owner, repo = _split_project(key.project)
        path = f"/repos/{key.project}/pulls/{key.number}/comments"
        return await self._get_pages(
            path,
            lambda page: self._github.rest.pulls.async_list_review_comments(
                owner, repo, key.number, per_page=PER_PAGE, page=page
            ),
        )

    async def reply_in_thread(self, key: TaskKey, thread_id: str, body: str) -> Comment:
        """Answer in a PR review thread (SPEC 7: a run started in a thread replies there)."""
        owner, repo = _split_project(key.project)
        root = _comment_id(thread_id)
        path = f"/repos/{key.project}/pulls/{key.number}/comments/{root}/replies"
        marker = new_marker()
        text = marked(cap_body(body, MAX_BODY_LENGTH), marker)

        async def find() -> Any | None:
            return next((c for c in await self._raw_review_comments(key) if has_marker(c.body, marker)), None)

        reply = await self._create(
            path,
            lambda: self._github.rest.pulls.async_create_reply_for_review_comment(
                owner, repo, key.number, root, body=text
            ),
            find,
        )
        return _comment(reply, thread_id)

    # ------------------------------------------------------------ delivery

    async def _get_json(self, path: str, send: Callable[[], Awaitable[Response[Any]]]) -> dict[str, Any]:
        """A GET read as plain JSON: only a few fields are needed, whatever the model's shape."""
        response = await self._call("GET", path, send)
        try:
            data = response.json()
        except ValueError:
            data = None
        if not isinstance(data, dict):
            raise ForgeError(f"github GET {path}: unexpected response shape")
        return data

    async def clone_url(self, project: str) -> str:
        owner, repo = _split_project(project)
        data = await self._get_json(f"/repos/{project}", lambda: self._github.rest.repos.async_get(owner, repo))
        url = data.get("clone_url")
        if not isinstance(url, str) or not url:
            raise ForgeError(f"github GET /repos/{project}: the repository has no clone_url")
        return url

    # ------------------------------------------------------------ setup script (SPEC 7.1)

    async def read_default_branch_file(self, project: str, path: str) -> bytes | None:
        """`path` on the repository's default branch (never a PR head), or None when absent.

        Read through the API, not the clone: the clone may be a PR head the task's author
        controls, and the setup script must come from people with write access.
        """
        owner, repo = _split_project(project)
        info = await self._get_json(f"/repos/{project}", lambda: self._github.rest.repos.async_get(owner, repo))
        branch = info.get("default_branch")
        if not isinstance(branch, str) or not branch:
            raise ForgeError(f"github GET /repos/{project}: the repository has no default_branch")
        where = f"/repos/{project}/contents/{path}"
        try:
            data = await self._get_json(
                where, lambda: self._github.rest.repos.async_get_content(owner, repo, path, ref=branch)
            )
        except GitHubNotFoundError:
            return None
        if data.get("type") != "file" or data.get("encoding") != "base64" or not isinstance(data.get("content"), str):
            raise ForgeError(f"github GET {where}: not a file")
        return base64.b64decode(data["content"])

    def git_http_auth(self) -> str | None:
        """HTTP Basic with `x-access-token` as the user: what GitHub accepts from PATs and app tokens."""
        if not self._token:
            return None
        credentials = base64.b64encode(f"x-access-token:{self._token}".encode()).decode()
        return f"Authorization: Basic {credentials}"

    async def git_identity(self, username: str | None) -> GitIdentity:
        """Profile name and public email; else GitHub's no-reply address `<id>+<login>@users.noreply.<host>`."""
        if username is None:
            data = await self._get_json("/user", self._github.rest.users.async_get_authenticated)
        else:
            data = await self._get_json(
                f"/users/{username}", lambda: self._github.rest.users.async_get_by_username(username)
            )
        login = str(data.get("login") or username or "coding-agent")
        host = urlsplit(self._config.api_url).hostname or "github.com"
        host = "github.com" if host == "api.github.com" else host
        email = data.get("email") or f"{data.get('id', 0)}+{login}@users.noreply.{host}"
        return GitIdentity.from_profile(str(data.get("name") or login), str(email), login)

    @staticmethod
    def _change(pull: Any) -> ChangeRequest:
        return ChangeRequest(
            number=pull.number,
            url=pull.html_url,
            head_branch=pull.head.ref,
            base_branch=pull.base.ref,
            body=_given(pull.body) or "",
            draft=bool(_given(pull.draft)),
        )

    async def find_open_change(self, project: str, head_branch: str) -> ChangeRequest | None:
        owner, repo = _split_project(project)
        path = f"/repos/{project}/pulls"
        pulls = await self._get(
            path,
            lambda: self._github.rest.pulls.async_list(
                owner, repo, state="open", head=f"{owner}:{head_branch}", per_page=PER_PAGE
            ),
        )
        matching = [pull for pull in pulls if pull.head.ref == head_branch]
        return self._change(matching[0]) if matching else None

    async def open_change(self, project: str, head_branch: str, base_branch: str, title: str, body: str) -> ChangeRequest:
        owner, repo = _split_project(project)
        path = f"/repos/{project}/pulls"
        text = cap_body(body, MAX_BODY_LENGTH)

        async def send() -> Response[Any]:
            return await self._github.rest.pulls.async_create(
                owner, repo, title=title[:MAX_TITLE_LENGTH], head=head_branch, base=base_branch, body=text, draft=True
            )

        async def find() -> ChangeRequest | None:
            return await self.find_open_change(project, head_branch)

        created = await self._create(path, send, find)
        return created if isinstance(created, ChangeRequest) else self._change(created)

    async def update_change(self, project: str, number: int, body: str) -> ChangeRequest:
        owner, repo = _split_project(project)
        path = f"/repos/{project}/pulls/{number}"
        response = await self._call(
            "PATCH",
            path,
            lambda: self._github.rest.pulls.async_update(owner, repo, number, body=cap_body(body, MAX_BODY_LENGTH)),
        )
        return self._change(self._data(response, "PATCH", path))

    # ------------------------------------------------------------ labels

    def _remember_labels(self, project: str, names: Iterable[str]) -> None:
        """Labels seen on an item exist in its repository: no need to create them."""
        self._known_labels.setdefault(project.lower(), set()).update(name.lower() for name in names)

    def _label_color(self, label: str) -> str:
        colors = {
            self.labels.bot_label: "5319e7",
            self.labels.processing_label: "fbca04",
            self.labels.done_label: "0e8a16",
            self.labels.paused_label: "c5def5",
            self.labels.stopped_label: "bfd4f2",
            self.labels.failed_label: "d93f0b",
        }
        return colors.get(label, "ededed")

    async def _ensure_label(self, project: str, label: str) -> None:
        owner, repo = _split_project(project)
        path = f"/repos/{project}/labels/{label}"
        try:
            await self._call(
                "GET", path, lambda: self._github.rest.issues.async_get_label(owner, repo, quote(label, safe=""))
            )
            return
        except GitHubNotFoundError:
            pass
        create_path = f"/repos/{project}/labels"
        try:
            await self._call(
                "POST",
                create_path,
                lambda: self._github.rest.issues.async_create_label(
                    owner, repo, name=label, color=self._label_color(label), description="Managed by coding-agent"
                ),
            )
        except ForgeError as error:
            if "HTTP 422" not in str(error):  # 422: created meanwhile by someone else
                raise

    async def add_label(self, key: TaskKey, label: str) -> None:
        known = self._known_labels.setdefault(key.project.lower(), set())
        if label.lower() not in known:
            await self._ensure_label(key.project, label)
            known.add(label.lower())
        owner, repo = _split_project(key.project)
        path = f"/repos/{key.project}/issues/{key.number}/labels"
        await self._call(
            "POST", path, lambda: self._github.rest.issues.async_add_labels(owner, repo, key.number, labels=[label])
        )

    async def remove_label(self, key: TaskKey, label: str) -> None:
        owner, repo = _split_project(key.project)
        path = f"/repos/{key.project}/issues/{key.number}/labels/{label}"
        try:
            await self._call(
                "DELETE",
                path,
                lambda: self._github.rest.issues.async_remove_label(owner, repo, key.number, quote(label, safe="")),
            )
        except GitHubNotFoundError:
            pass  # not on the issue: already the state we want

    # ------------------------------------------------------------ people

    async def get_permission(self, key: TaskKey, username: str) -> Permission:
        owner, repo = _split_project(key.project)
        path = f"/repos/{key.project}/collaborators/{username}/permission"
        try:
            result = await self._get(
                path, lambda: self._github.rest.repos.async_get_collaborator_permission_level(owner, repo, username)
            )
        except GitHubNotFoundError:
            return Permission.NONE
        # role_name holds the fine level (maintain, triage); custom roles fall back to `permission`.
        return _ROLE_PERMISSIONS.get(result.role_name) or _ROLE_PERMISSIONS.get(result.permission, Permission.NONE)

    async def find_trigger_user(self, key: TaskKey) -> str | None:
        """The actor of the newest `labeled` (bot_label) or `assigned` (bot) event.

        Events are read as plain JSON: GitHub has more event types than githubkit's
        union of models, and one unknown type must not hide the trigger.
        """
        owner, repo = _split_project(key.project)
        path = f"/repos/{key.project}/issues/{key.number}/events"
        events: list[dict[str, Any]] = []
        page = 1
        while True:
            response = await self._call(
                "GET",
                path,
                lambda number=page: self._github.rest.issues.async_list_events(  # type: ignore[misc]
                    owner, repo, key.number, per_page=PER_PAGE, page=number
                ),
            )
            try:
                chunk = response.json()
            except ValueError:
                raise ForgeError(f"github GET {path}: unexpected response shape") from None
            if not isinstance(chunk, list):
                raise ForgeError(f"github GET {path}: unexpected response shape")
            events.extend(event for event in chunk if isinstance(event, dict))
            if not _has_next_page(response, len(chunk)):
                break
            page += 1
        bot_label = self.labels.bot_label.lower()
        bot = (self.bot_name or "").lower()
        for event in reversed(events):
            actor = (event.get("actor") or {}).get("login")
            if not actor:
                continue
            if event.get("event") == "labeled" and str((event.get("label") or {}).get("name", "")).lower() == bot_label:
                return str(actor)
            assignee = str((event.get("assignee") or {}).get("login", "")).lower()
            if event.get("event") == "assigned" and bot and assignee == bot:
                return str(actor)
        return None

    async def aclose(self) -> None:
        await self._transport.close_pool()

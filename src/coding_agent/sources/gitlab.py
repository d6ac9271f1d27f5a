"""The GitLab task source: issues and merge requests through python-gitlab.

python-gitlab is blocking, so every call runs in a worker thread; every call also goes
through the shared `RetryPolicy`, with python-gitlab's own retrying switched off (it
would sleep for whatever `Retry-After` says, uncapped, and hide 429s from our policy).

Reads that steering repeats at every checkpoint (the item, its notes, discussions) are
conditional requests: the last `ETag` goes out as `If-None-Match` and a 304 answers from
memory (SPEC 8.1, 13). Notes are fetched newest-updated first and only until a note we
already hold unchanged, so a long thread costs one request, not one per page.
"""

from __future__ import annotations

import asyncio
import base64
import threading
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any, TypeVar
from urllib.parse import quote, urlencode, urlsplit

import gitlab
import requests
from gitlab.exceptions import GitlabError
from requests.structures import CaseInsensitiveDict

from coding_agent.config import GitLabConfig, LabelConfig
from coding_agent.domain.delivery import ChangeRequest, GitIdentity
from coding_agent.domain.tasks import Comment, Forge, Permission, Task, TaskKey, TaskKind, Thread
from coding_agent.errors import ForgeError, TransientError
from coding_agent.redaction import Redactor
from coding_agent.retry import RetryPolicy, retry_async
from coding_agent.sources.http import ETagCache, rate_limited, retry_after, transient_status
from coding_agent.sources.writes import cap_body, has_marker, marked, new_marker, strip_marker, write_once

__all__ = ["GitLabSource", "instance_url", "permission_for_access_level"]

T = TypeVar("T")
JSON = dict[str, Any]

PER_PAGE = 100  # GitLab's maximum
# GitLab refuses a note longer than this ("Note is too long (maximum is 1000000 characters)").
MAX_BODY_LENGTH = 1_000_000
_THREAD_NOTE_TYPES = ("DiscussionNote", "DiffNote")
_STATES = {"opened": "open"}
_TRANSPORT_ERRORS = (requests.ConnectionError, requests.Timeout, requests.exceptions.ChunkedEncodingError)


def instance_url(api_url: str) -> str:
    """`https://gitlab.example.com/api/v4/` -> `https://gitlab.example.com` (python-gitlab adds /api/v4)."""
    url = api_url.strip().rstrip("/")
    return url.removesuffix("/api/v4").rstrip("/")


def permission_for_access_level(level: int | None) -> Permission:
    """GitLab access levels: Maintainer (40) and Owner (50) admin, Developer (30) write, Guest/Reporter read."""
    if level is None:
        return Permission.NONE
    if level >= 40:
        return Permission.ADMIN
    if level >= 30:
        return Permission.WRITE
    if level >= 10:
        return Permission.READ
    return Permission.NONE


class _Client(gitlab.Gitlab):
    """python-gitlab with its internal retries off: 429 and 5xx surface to our RetryPolicy."""

    def http_request(self, verb: str, path: str, *args: Any, **kwargs: Any) -> requests.Response:
        kwargs["obey_rate_limit"] = False
        kwargs["retry_transient_errors"] = False
        return super().http_request(verb, path, *args, **kwargs)


@dataclass(frozen=True)
class _Page:
    """A GET answer; `fresh` is False when the server said 304 and `data` came from memory."""

    data: Any
    headers: Mapping[str, str]
    fresh: bool


def _parse_time(value: str) -> datetime:
    return datetime.fromisoformat(value.replace("Z", "+00:00"))


def _route(kind: TaskKind) -> str:
    return "issues" if kind is TaskKind.ISSUE else "merge_requests"


def _project_path(data: JSON) -> str:
    """`group/project` of an issue/MR, from `references.full` (or `web_url`): listings lack the path."""
    full = (data.get("references") or {}).get("full")
    if full:
        for sign in ("#", "!"):
            if sign in full:
                return full.rsplit(sign, 1)[0]
    web_url = str(data.get("web_url", ""))
    if "/-/" in web_url:
        return web_url.split("/-/", 1)[0].split("://", 1)[-1].split("/", 1)[1]
    raise ForgeError(f"gitlab item {data.get('id')} carries neither references.full nor web_url")


def _assignees(data: JSON) -> list[str]:
    names = [user["username"] for user in data.get("assignees") or [] if user]
    if not names and data.get("assignee"):
        names = [data["assignee"]["username"]]
    return names


def _comment(note: JSON, thread_id: str | None = None) -> Comment:
    """A note as the domain sees it: without our hidden marker."""
    return Comment(
        id=str(note["id"]),
        author=(note.get("author") or {}).get("username", ""),
        body=strip_marker(note.get("body") or ""),
        created_at=_parse_time(note["created_at"]),
        thread_id=thread_id,
    )


def _chronological(notes: list[JSON]) -> list[JSON]:
    return sorted(notes, key=lambda note: (note["created_at"], note["id"]))


class GitLabSource:
    """`Source` over one GitLab scope: a group (and its subgroups) or one project."""

    forge: Forge = "gitlab"

    def __init__(
        self,
        config: GitLabConfig,
        retry: RetryPolicy | None = None,
        *,
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
        timeout: float = 30.0,
    ) -> None:
        self.config = config
        self.labels: LabelConfig = config
        self.bot_name = config.bot_name
        self._retry = retry or RetryPolicy()
        self._sleep = sleep
        self._token = config.token.get_secret_value() if config.token is not None else None
        session = requests.Session()
        session.hooks["response"].append(self._remember_response)
        self._gl = _Client(
            instance_url(config.api_url),
            private_token=self._token,
            timeout=timeout,
            retry_transient_errors=False,
            session=session,
        )
        self._local = threading.local()
        self._lock = threading.Lock()
        self._pages: ETagCache[_Page] = ETagCache()
        self._notes: ETagCache[dict[int, JSON]] = ETagCache()
        self._known_labels: dict[str, set[str]] = {}
        self._user_ids: dict[str, int | None] = {}
        self._label_colors = {
            config.bot_label: "#6f42c1",
            config.processing_label: "#1f75cb",
            config.done_label: "#108548",
            config.paused_label: "#c17d10",
            config.stopped_label: "#737278",
            config.failed_label: "#dd2b0e",
        }

    # -- plumbing ------------------------------------------------------------------

    def _remember_response(self, response: requests.Response, *args: Any, **kwargs: Any) -> None:
        """requests hook: python-gitlab's errors drop the headers, and Retry-After lives there."""
        self._local.response = response

    async def _call(self, what: str, fn: Callable[[], T]) -> T:
        """Run blocking `fn` in a thread under the retry policy; `what` names it in errors and logs."""

        async def attempt() -> T:
            return await asyncio.to_thread(self._guarded, what, fn)

        return await retry_async(attempt, self._retry, f"gitlab {what}", sleep=self._sleep)

    async def _create(self, what: str, fn: Callable[[], T], find: Callable[[], Awaitable[T | None]]) -> T:
        """A POST that creates something: retried only after `find` says it did not happen."""
        return await write_once(
            f"gitlab {what}", lambda: asyncio.to_thread(self._guarded, what, fn), find, self._retry, self._sleep
        )

    def _guarded(self, what: str, fn: Callable[[], T]) -> T:
        self._local.response = None
        try:
            return fn()
        except _TRANSPORT_ERRORS as error:
            kind = "timed out" if isinstance(error, requests.Timeout) else "connection failed"
            raise TransientError(f"gitlab {what}: {kind}") from error
        except GitlabError as error:
            raise self._translate(what, error) from error

    def _translate(self, what: str, error: GitlabError) -> Exception:
        code = error.response_code
        response: requests.Response | None = getattr(self._local, "response", None)
        headers = response.headers if response is not None and response.status_code == code else {}
        if code is not None and transient_status(code, headers):
            return TransientError(
                f"gitlab {what}: HTTP {code}",
                retry_after=retry_after(headers),
                maybe_applied=not rate_limited(code, headers),
            )
        detail = self._redact(str(error.error_message))[:300]
        status = f"HTTP {code}" if code is not None else type(error).__name__
        return ForgeError(f"gitlab {what} failed: {status} {detail}".rstrip())

    def _redact(self, text: str) -> str:
        return Redactor([self._token] if self._token else []).text(text)

    def _get(self, path: str, query: Mapping[str, Any] | None = None, *, conditional: bool = True) -> _Page:
        """GET with `If-None-Match` from the last answer to the same URL (blocking)."""
        query = dict(query or {})
        key = f"{path}?{urlencode(sorted(query.items()))}"
        cached = self._pages.get(key) if conditional else None
        headers = {"If-None-Match": cached.headers["ETag"]} if cached is not None else None
        try:
            response = self._gl.http_request("get", path, query_data=query, extra_headers=headers)
        except GitlabError as error:
            if error.response_code == 304 and cached is not None:
                return _Page(cached.data, cached.headers, fresh=False)
            raise
        page = _Page(response.json(), CaseInsensitiveDict(response.headers), fresh=True)
        if conditional and "ETag" in page.headers:
            self._pages.put(key, page)
        return page

    def _get_all(self, path: str, query: Mapping[str, Any] | None = None) -> list[JSON]:
        """Every page of a listing, each page a conditional request (blocking)."""
        items: list[JSON] = []
        page_number: int | None = 1
        while page_number is not None:
            page = self._get(path, {**(query or {}), "per_page": PER_PAGE, "page": page_number})
            items.extend(page.data)
            next_page = page.headers.get("X-Next-Page") or ""
            page_number = int(next_page) if next_page.isdigit() else None
        return items

    def _project_ref(self, project: str) -> str:
        return quote(project, safe="")

    def _item_path(self, key: TaskKey) -> str:
        if key.forge != "gitlab":
            raise ValueError(f"{key} is not a GitLab task")
        return f"/projects/{self._project_ref(key.project)}/{_route(key.kind)}/{key.number}"

    def _manager(self, key: TaskKey) -> Any:
        project = self._gl.projects.get(key.project, lazy=True)
        return project.issues if key.kind is TaskKind.ISSUE else project.mergerequests

    # -- building tasks ------------------------------------------------------------

    def _task(self, data: JSON, kind: TaskKind) -> Task:
        extra = {"id": str(data["id"]), "project_id": str(data.get("project_id", ""))}
        if kind is TaskKind.CHANGE:
            extra["draft"] = str(bool(data.get("draft"))).lower()
        return Task(
            key=TaskKey("gitlab", _project_path(data), kind, int(data["iid"])),
            title=data.get("title") or "",
            body=data.get("description") or "",
            author=(data.get("author") or {}).get("username", ""),
            labels=tuple(data.get("labels") or ()),
            assignees=tuple(_assignees(data)),
            url=data.get("web_url") or "",
            created_at=_parse_time(data["created_at"]),
            updated_at=_parse_time(data["updated_at"]),
            state=_STATES.get(str(data.get("state")), str(data.get("state"))),
            head_branch=data.get("source_branch"),
            base_branch=data.get("target_branch"),
            extra=extra,
        )

    # -- Source --------------------------------------------------------------------

    async def discover(self) -> list[Task]:
        """Opened issues and MRs with `bot_label` in the group or project: two listings, all pages."""
        return await self._list_labelled(self.config.bot_label)

    async def discover_followups(self, since: datetime) -> list[Task]:
        """Done issues and MRs updated since `since`: two listings; mentions are checked at claim."""
        if not self.bot_name:
            return []
        return await self._list_labelled(self.config.done_label, updated_after=since.isoformat())

    async def _list_labelled(self, label: str, **more: Any) -> list[Task]:
        scope: Any
        if self.config.group is not None:
            scope = self._gl.groups.get(self.config.group, lazy=True)
            where = "/groups/:id"
        else:
            assert self.config.project_id is not None  # GitLabConfig requires group or project_id
            scope = self._gl.projects.get(self.config.project_id, lazy=True)
            where = "/projects/:id"
        filters: dict[str, Any] = {"labels": [label], "state": "opened", "scope": "all", **more}
        if self.config.assignee:
            filters["assignee_username"] = self.config.assignee

        def listing(manager: Any) -> Callable[[], list[JSON]]:
            return lambda: [item.attributes for item in manager.list(get_all=True, per_page=PER_PAGE, **filters)]

        issues = await self._call(f"GET {where}/issues", listing(scope.issues))
        changes = await self._call(f"GET {where}/merge_requests", listing(scope.mergerequests))
        tasks = [self._task(data, TaskKind.ISSUE) for data in issues]
        tasks += [self._task(data, TaskKind.CHANGE) for data in changes]
        return sorted(tasks, key=lambda task: (task.created_at, str(task.key)))

    async def get_task(self, key: TaskKey) -> Task:
        path = self._item_path(key)
        page = await self._call(f"GET {path}", lambda: self._get(path))
        return self._task(page.data, key.kind)

    async def list_comments(self, key: TaskKey) -> list[Comment]:
        """Non-system notes, oldest first. On MRs, notes inside threads are left to `list_threads`."""
        path = self._item_path(key) + "/notes"
        notes = await self._call(f"GET {path}", lambda: self._fetch_notes(path))
        comments = []
        for note in _chronological(notes):
            if note.get("system"):
                continue
            if key.kind is TaskKind.CHANGE and note.get("type") in _THREAD_NOTE_TYPES:
                continue
            comments.append(_comment(note))
        return comments

    def _fetch_notes(self, path: str) -> list[JSON]:
        """All notes, re-reading only what changed since the last call (blocking).

        Ordered by `updated_at` descending, every new or edited note comes before every
        note we already hold unchanged, so the walk stops at the first of those. A
        changed `X-Total` afterwards means deletions: then everything is read again.
        """
        query = {"order_by": "updated_at", "sort": "desc", "per_page": PER_PAGE}
        first = self._get(path, {**query, "page": 1})
        known = self._notes.get(path)
        if not first.fresh and known is not None:
            return list(known.values())
        merged = self._walk_notes(path, query, first, known or {})
        total = str(first.headers.get("X-Total", ""))
        if known and total.isdigit() and int(total) != len(merged):
            merged = self._walk_notes(path, query, first, {})
        self._notes.put(path, merged)
        return list(merged.values())

    def _walk_notes(self, path: str, query: Mapping[str, Any], first: _Page, known: dict[int, JSON]) -> dict[int, JSON]:
        merged = dict(known)
        page = first
        while True:
            reached_known = False
            for note in page.data:
                held = known.get(note["id"])
                if held is not None and held.get("updated_at") == note.get("updated_at"):
                    reached_known = True
                    break
                merged[note["id"]] = note
            next_page = str(page.headers.get("X-Next-Page") or "")
            if reached_known or not next_page.isdigit():
                return merged
            page = self._get(path, {**query, "page": int(next_page)}, conditional=False)

    async def list_threads(self, key: TaskKey) -> list[Thread]:
        """MR discussions that are real threads (not single notes); [] for issues."""
        if key.kind is TaskKind.ISSUE:
            return []
        path = self._item_path(key) + "/discussions"
        discussions = await self._call(f"GET {path}", lambda: self._get_all(path))
        threads = []
        for discussion in discussions:
            if discussion.get("individual_note"):
                continue
            notes = [note for note in discussion.get("notes") or [] if not note.get("system")]
            if not notes:
                continue
            position = notes[0].get("position") or {}
            threads.append(
                Thread(
                    id=str(discussion["id"]),
                    comments=tuple(_comment(note, str(discussion["id"])) for note in notes),
                    path=position.get("new_path") or position.get("old_path"),
                    line=position.get("new_line") or position.get("old_line"),
                )
            )
        return threads

    async def post_comment(self, key: TaskKey, body: str) -> Comment:
        path = self._item_path(key) + "/notes"
        marker = new_marker()
        text = marked(cap_body(body, MAX_BODY_LENGTH), marker)

        def create() -> JSON:
            item = self._manager(key).get(key.number, lazy=True)
            return dict(item.notes.create({"body": text}).attributes)

        async def find() -> JSON | None:
            notes = await self._call(f"GET {path}", lambda: self._fetch_notes(path))
            return next((note for note in notes if has_marker(note.get("body"), marker)), None)

        return _comment(await self._create(f"POST {path}", create, find))

    async def edit_comment(self, key: TaskKey, comment_id: str, body: str) -> None:
        path = f"{self._item_path(key)}/notes/{comment_id}"
        text = cap_body(body, MAX_BODY_LENGTH)

        def update() -> None:
            self._manager(key).get(key.number, lazy=True).notes.update(int(comment_id), {"body": text})

        await self._call(f"PUT {path}", update)

    async def add_label(self, key: TaskKey, label: str) -> None:
        """Create the project label if new, then `add_labels`: a single-label write, no stale overwrite."""
        await self._ensure_label(key.project, label)
        path = self._item_path(key)
        await self._call(f"PUT {path}", lambda: self._manager(key).update(key.number, {"add_labels": label}))

    async def remove_label(self, key: TaskKey, label: str) -> None:
        """`remove_labels`: GitLab ignores a label that is not there."""
        path = self._item_path(key)
        await self._call(f"PUT {path}", lambda: self._manager(key).update(key.number, {"remove_labels": label}))

    async def _ensure_label(self, project: str, label: str) -> None:
        with self._lock:
            known = self._known_labels.get(project)
            if known is not None and label in known:
                return
        path = f"/projects/{self._project_ref(project)}/labels"
        labels = self._gl.projects.get(project, lazy=True).labels
        if known is None:
            names = await self._call(
                f"GET {path}",
                lambda: {item.name for item in labels.list(get_all=True, per_page=PER_PAGE)},
            )
            with self._lock:
                known = self._known_labels.setdefault(project, set())
                known.update(names)
            if label in known:
                return

        def create() -> None:
            try:
                labels.create({"name": label, "color": self._label_colors.get(label, "#6699cc")})
            except GitlabError as error:
                if error.response_code != 409:  # 409: created meanwhile, which is what we wanted
                    raise

        await self._call(f"POST {path}", create)
        with self._lock:
            self._known_labels.setdefault(project, set()).add(label)

    async def get_assignees(self, key: TaskKey) -> list[str]:
        """Read now (a conditional GET: a 304 confirms the remembered answer is current)."""
        path = self._item_path(key)
        page = await self._call(f"GET {path}", lambda: self._get(path))
        return _assignees(page.data)

    async def get_permission(self, key: TaskKey, username: str) -> Permission:
        user_id = await self._user_id(username)
        if user_id is None:
            return Permission.NONE
        path = f"/projects/{self._project_ref(key.project)}/members/all/{user_id}"

        def level() -> int | None:
            try:
                member = self._gl.projects.get(key.project, lazy=True).members_all.get(user_id)
            except GitlabError as error:
                if error.response_code == 404:
                    return None
                raise
            return int(member.access_level)

        return permission_for_access_level(await self._call(f"GET {path}", level))

    async def _user_id(self, username: str) -> int | None:
        with self._lock:
            if username in self._user_ids:
                return self._user_ids[username]

        def lookup() -> int | None:
            users = self._gl.users.list(username=username, per_page=PER_PAGE, get_all=False)
            return next((int(user.id) for user in users if user.username == username), None)

        user_id = await self._call("GET /users", lookup)
        with self._lock:
            self._user_ids[username] = user_id
        return user_id

    async def find_trigger_user(self, key: TaskKey) -> str | None:
        """The user of the newest `add` event of `bot_label`, from the resource label events."""
        path = self._item_path(key) + "/resource_label_events"
        events = await self._call(f"GET {path}", lambda: self._get_all(path))
        bot_label = self.config.bot_label
        newest_first = sorted(events, key=lambda e: (e.get("created_at") or "", e.get("id") or 0), reverse=True)
        for event in newest_first:
            if event.get("action") == "add" and (event.get("label") or {}).get("name") == bot_label:
                return (event.get("user") or {}).get("username")
        return None

    # -- delivery (SPEC 7) ------------------------------------------------------------

    async def reply_in_thread(self, key: TaskKey, thread_id: str, body: str) -> Comment:
        """A note on the same discussion (`Thread.id` is the discussion id)."""
        path = f"{self._item_path(key)}/discussions/{thread_id}/notes"
        marker = new_marker()
        text = marked(cap_body(body, MAX_BODY_LENGTH), marker)

        def create() -> JSON:
            item = self._manager(key).get(key.number, lazy=True)
            return dict(item.discussions.get(thread_id, lazy=True).notes.create({"body": text}).attributes)

        async def find() -> JSON | None:
            listing = self._item_path(key) + "/discussions"
            discussions = await self._call(f"GET {listing}", lambda: self._get_all(listing))
            notes = [note for d in discussions if str(d.get("id")) == thread_id for note in d.get("notes") or []]
            return next((note for note in notes if has_marker(note.get("body"), marker)), None)

        return _comment(await self._create(f"POST {path}", create, find), thread_id)

    async def clone_url(self, project: str) -> str:
        path = f"/projects/{self._project_ref(project)}"
        data = await self._call(f"GET {path}", lambda: dict(self._gl.projects.get(project).attributes))
        url = data.get("http_url_to_repo")
        if not isinstance(url, str) or not url:
            raise ForgeError(f"gitlab GET {path}: the project has no http_url_to_repo")
        return url

    # -- setup script (SPEC 7.1) ----------------------------------------------------

    async def read_default_branch_file(self, project: str, path: str) -> bytes | None:
        """`path` on the project's default branch (never an MR head), or None when absent."""
        where = f"/projects/{self._project_ref(project)}/repository/files"

        def read() -> bytes | None:
            handle = self._gl.projects.get(project)
            try:
                return bytes(handle.files.get(file_path=path, ref=handle.default_branch).decode())
            except GitlabError as error:
                if error.response_code == 404:
                    return None
                raise

        return await self._call(f"GET {where}", read)

    def git_http_auth(self) -> str | None:
        """HTTP Basic with user `oauth2` and the token as password (GitLab ignores the user for PATs)."""
        if not self._token:
            return None
        credentials = base64.b64encode(f"oauth2:{self._token}".encode()).decode()
        return f"Authorization: Basic {credentials}"

    async def git_identity(self, username: str | None) -> GitIdentity:
        """Name and commit/public email; else GitLab's no-reply `<id>-<username>@users.noreply.<host>`."""
        if username is None:
            data: JSON | None = await self._call("GET /user", lambda: self._get("/user", conditional=False).data)
        else:

            def lookup() -> JSON | None:
                users = self._gl.users.list(username=username, per_page=PER_PAGE, get_all=False)
                return next((dict(user.attributes) for user in users if user.username == username), None)

            data = await self._call("GET /users", lookup)
        if not data:
            raise ForgeError(f"gitlab user {username} not found")
        host = urlsplit(instance_url(self.config.api_url)).hostname or "gitlab.com"
        email = data.get("commit_email") or data.get("public_email") or data.get("email")
        email = email or f"{data.get('id', 0)}-{data['username']}@users.noreply.{host}"
        return GitIdentity.from_profile(str(data.get("name") or data["username"]), str(email), str(data["username"]))

    @staticmethod
    def _change(data: JSON) -> ChangeRequest:
        return ChangeRequest(
            number=int(data["iid"]),
            url=str(data.get("web_url") or ""),
            head_branch=str(data.get("source_branch") or ""),
            base_branch=str(data.get("target_branch") or ""),
            body=str(data.get("description") or ""),
            draft=bool(data.get("draft") or data.get("work_in_progress")),
        )

    async def find_open_change(self, project: str, head_branch: str) -> ChangeRequest | None:
        path = f"/projects/{self._project_ref(project)}/merge_requests"

        def listing() -> list[JSON]:
            manager = self._gl.projects.get(project, lazy=True).mergerequests
            found = manager.list(source_branch=head_branch, state="opened", per_page=PER_PAGE, get_all=False)
            return [dict(mr.attributes) for mr in found]

        requests_ = [mr for mr in await self._call(f"GET {path}", listing) if mr.get("source_branch") == head_branch]
        same_project = [mr for mr in requests_ if mr.get("source_project_id") in (None, mr.get("target_project_id"))]
        return self._change(same_project[0]) if same_project else None

    async def open_change(self, project: str, head_branch: str, base_branch: str, title: str, body: str) -> ChangeRequest:
        """A draft MR: GitLab marks drafts by the `Draft:` title prefix."""
        path = f"/projects/{self._project_ref(project)}/merge_requests"
        fields = {
            "source_branch": head_branch,
            "target_branch": base_branch,
            "title": title if title.lower().startswith("draft:") else f"Draft: {title}",
            "description": cap_body(body, MAX_BODY_LENGTH),
        }

        def create() -> JSON:
            return dict(self._gl.projects.get(project, lazy=True).mergerequests.create(fields).attributes)

        async def find() -> JSON | None:
            found = await self.find_open_change(project, head_branch)
            return {"iid": found.number, "web_url": found.url, "source_branch": found.head_branch,
                    "target_branch": found.base_branch, "description": found.body, "draft": found.draft} if found else None

        return self._change(await self._create(f"POST {path}", create, find))

    async def update_change(self, project: str, number: int, body: str) -> ChangeRequest:
        path = f"/projects/{self._project_ref(project)}/merge_requests/{number}"

        def update() -> JSON:
            fields = {"description": cap_body(body, MAX_BODY_LENGTH)}
            return dict(self._gl.projects.get(project, lazy=True).mergerequests.update(number, fields))

        return self._change(await self._call(f"PUT {path}", update))

    async def aclose(self) -> None:
        await asyncio.to_thread(self._gl.session.close)

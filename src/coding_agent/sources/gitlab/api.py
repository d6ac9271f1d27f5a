"""The GitLab task source: the REST calls behind the `Source` protocol.

The request path (threads, retries, timeouts, conditional requests, error translation)
is `client.py`; what GitLab's answers mean in domain terms is `mapping.py`. This module
says which endpoints answer each `Source` question. Every note, description and title
it writes is neutralised first (`quick_actions.py`: GitLab would run a line-leading
`/merge` as the bot); `mapping.py` undoes it on read. (Over 300 lines: one method per
`Source` operation, each a few lines; splitting them would scatter the protocol.)
"""

from __future__ import annotations

import asyncio
import base64
import logging
import threading
from collections.abc import AsyncGenerator, Awaitable, Callable
from contextlib import AbstractAsyncContextManager, nullcontext
from datetime import datetime
from functools import partial
from typing import Any
from urllib.parse import urlsplit

from gitlab.exceptions import GitlabError

from coding_agent.config import GitLabConfig, LabelConfig
from coding_agent.domain.delivery import ChangeRequest, GitIdentity
from coding_agent.domain.tasks import Comment, Forge, Permission, Task, TaskKey, TaskKind, Thread, canonical_project
from coding_agent.errors import ForgeError
from coding_agent.retry import RetryPolicy
from coding_agent.sources.gitlab.ci import GitLabCi
from coding_agent.sources.gitlab.client import PER_PAGE, GitLabClient
from coding_agent.sources.gitlab.mapping import (
    JSON,
    MAX_BODY_LENGTH,
    THREAD_NOTE_TYPES,
    assignees,
    chronological,
    instance_url,
    item_path,
    permission_for_access_level,
    project_path,
    project_ref,
    to_change,
    to_comment,
    to_task,
    touched_since,
)
from coding_agent.sources.gitlab.quick_actions import neutralise_quick_actions
from coding_agent.sources.http import LifetimeAnswers, since_the_hour
from coding_agent.sources.writes import cap_body, has_marker, marked, new_marker

__all__ = ["GitLabSource"]

log = logging.getLogger(__name__)


def _canonical(data: JSON) -> bool:
    """Whether a listed item's project path is canonical; else one log line naming it, and
    the poll goes on without it (no task key names it, SPEC 15)."""
    try:
        canonical_project("gitlab", project_path(data))
    except ValueError as error:
        log.warning("poll: refused: %s", error)
        return False
    return True


def _body(text: str) -> str:
    """A note or description as GitLab may receive it: no quick action, within the size limit."""
    return cap_body(neutralise_quick_actions(text), MAX_BODY_LENGTH)


class GitLabSource(GitLabCi):
    """`Source` over one GitLab scope: a group (and its subgroups) or one project.

    The CI methods (SPEC 16) are its base `GitLabCi` (ci.py)."""

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
        token = config.token.get_secret_value() if config.token is not None else None
        self._http = GitLabClient(instance_url(config.api_url), token, retry or RetryPolicy(), sleep, timeout)
        self._lock = threading.Lock()
        self._known_labels: dict[str, set[str]] = {}
        self._user_ids: dict[str, int | None] = {}
        self._clone_urls: LifetimeAnswers[str] = LifetimeAnswers()
        self._bot_identity: LifetimeAnswers[GitIdentity] = LifetimeAnswers()
        self._labels_made: LifetimeAnswers[None] = LifetimeAnswers()
        self._label_colors = {
            config.bot_label: "#6f42c1",
            config.processing_label: "#1f75cb",
            config.done_label: "#108548",
            config.paused_label: "#c17d10",
            config.stopped_label: "#737278",
            config.failed_label: "#dd2b0e",
        }

    # -- Source --------------------------------------------------------------------

    async def discover(self) -> list[Task]:
        """Opened issues and MRs with `bot_label` in the group or project: two listings, all pages."""
        tasks = [task async for page in self._labelled(self.config.bot_label) for task in page]
        return sorted(tasks, key=lambda task: (task.created_at, str(task.key)))

    async def discover_followups(self, since: datetime) -> AsyncGenerator[list[Task], None]:
        """Done issues and MRs updated since `since`: two listings; mentions are checked at claim."""
        if not self.bot_name:
            return
        async for page in self._labelled(self.config.done_label, updated_after=since_the_hour(since).isoformat()):
            yield page

    async def discover_review_followups(self, since: datetime) -> AsyncGenerator[list[Task], None]:
        """One listing: open MRs the bot opened, updated since `since` (MR discussions, SPEC 3)."""
        if not self.bot_name:
            return
        where, scope = self._scope()
        filters: dict[str, Any] = {"state": "opened", "scope": "all", "author_username": self.bot_name}
        filters["updated_after"] = since_the_hour(since).isoformat()
        async for page in self._pages(f"GET {where}/merge_requests", scope.mergerequests, filters, TaskKind.CHANGE):
            yield page

    async def _pages(
        self, what: str, manager: Any, filters: dict[str, Any], kind: TaskKind
    ) -> AsyncGenerator[list[Task], None]:
        """A listing's items as tasks, a page per request, following `X-Next-Page`. Not
        kept in the answer cache: a poll's pages would crowd out what steering rereads."""
        number: int | None = 1
        while number is not None:
            items, number = await self._http.call(
                what, partial(self._http.page, manager.path, filters, number, conditional=False)
            )
            yield [to_task(data, kind) for data in items if _canonical(data)]

    def _scope(self) -> tuple[str, Any]:
        """The configured group or project, as a lazy python-gitlab object, and its path."""
        if self.config.group is not None:
            return "/groups/:id", self._http.gl.groups.get(self.config.group, lazy=True)
        assert self.config.project_id is not None  # GitLabConfig requires group or project_id
        return "/projects/:id", self._http.gl.projects.get(self.config.project_id, lazy=True)

    async def _labelled(self, label: str, **more: Any) -> AsyncGenerator[list[Task], None]:
        """Opened issues, then MRs, carrying `label` (and the configured assignee), a page at a time."""
        where, scope = self._scope()
        filters: dict[str, Any] = {"labels": label, "state": "opened", "scope": "all", **more}
        if self.config.assignee:
            filters["assignee_username"] = self.config.assignee
        async for page in self._pages(f"GET {where}/issues", scope.issues, filters, TaskKind.ISSUE):
            yield page
        async for page in self._pages(f"GET {where}/merge_requests", scope.mergerequests, filters, TaskKind.CHANGE):
            yield page

    async def get_task(self, key: TaskKey) -> Task:
        path = item_path(key)
        page = await self._http.call(f"GET {path}", lambda: self._http.get(path))
        return to_task(page.data, key.kind)

    async def list_comments(self, key: TaskKey, since: datetime | None = None) -> list[Comment]:
        """Non-system notes, oldest first. On MRs, notes inside threads are left to `list_threads`.

        The client reads only the notes new or edited since its last read (`notes`), so
        `since` asks the forge nothing less; it spares the mapping of the others."""
        path = item_path(key) + "/notes"
        notes = await self._http.call(f"GET {path}", lambda: self._http.notes(path))
        if since is not None:
            notes = [note for note in notes if touched_since(note, since)]
        comments = []
        for note in chronological(notes):
            if note.get("system"):
                continue
            if key.kind is TaskKind.CHANGE and note.get("type") in THREAD_NOTE_TYPES:
                continue
            comments.append(to_comment(note))
        return comments

    async def list_threads(self, key: TaskKey) -> list[Thread]:
        """MR discussions that are real threads (not single notes); [] for issues."""
        if key.kind is TaskKind.ISSUE:
            return []
        path = item_path(key) + "/discussions"
        discussions = await self._http.call(f"GET {path}", lambda: self._http.get_all(path))
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
                    comments=tuple(to_comment(note, str(discussion["id"])) for note in notes),
                    path=position.get("new_path") or position.get("old_path"),
                    line=position.get("new_line") or position.get("old_line"),
                )
            )
        return threads

    async def post_comment(self, key: TaskKey, body: str) -> Comment:
        path = item_path(key) + "/notes"
        marker = new_marker()
        text = marked(_body(body), marker)

        def create() -> JSON:
            item = self._http.manager(key).get(key.number, lazy=True)
            return dict(item.notes.create({"body": text}).attributes)

        async def find() -> JSON | None:
            notes = await self._http.call(f"GET {path}", lambda: self._http.notes(path))
            return next((note for note in notes if has_marker(note.get("body"), marker)), None)

        return to_comment(await self._http.create(f"POST {path}", create, find))

    async def edit_comment(self, key: TaskKey, comment_id: str, body: str) -> None:
        path = f"{item_path(key)}/notes/{comment_id}"
        text = _body(body)

        def update() -> None:
            self._http.manager(key).get(key.number, lazy=True).notes.update(int(comment_id), {"body": text})

        await self._http.call(f"PUT {path}", update)

    async def add_label(self, key: TaskKey, label: str) -> None:
        """Create the project label if new, then `add_labels`: a single-label write, no stale overwrite.

        The runs that claim together share one listing (and creation), not one each."""
        await self._labels_made.get(f"{key.project}\n{label}", lambda: self._ensure_label(key.project, label))
        path = item_path(key)
        await self._http.call(f"PUT {path}", lambda: self._http.manager(key).update(key.number, {"add_labels": label}))

    async def remove_label(self, key: TaskKey, label: str) -> None:
        """`remove_labels`: GitLab ignores a label that is not there."""
        path = item_path(key)
        await self._http.call(f"PUT {path}", lambda: self._http.manager(key).update(key.number, {"remove_labels": label}))

    async def _ensure_label(self, project: str, label: str) -> None:
        with self._lock:
            known = self._known_labels.get(project)
            if known is not None and label in known:
                return
        path = f"/projects/{project_ref(project)}/labels"
        labels = self._http.gl.projects.get(project, lazy=True).labels
        if known is None:
            names = await self._http.call(
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

        await self._http.call(f"POST {path}", create)
        with self._lock:
            self._known_labels.setdefault(project, set()).add(label)

    async def get_assignees(self, key: TaskKey) -> list[str]:
        """Read now (a conditional GET: a 304 confirms the remembered answer is current)."""
        path = item_path(key)
        page = await self._http.call(f"GET {path}", lambda: self._http.get(path))
        return assignees(page.data)

    async def get_permission(self, key: TaskKey, username: str) -> Permission:
        user_id = await self._user_id(username)
        if user_id is None:
            return Permission.NONE
        path = f"/projects/{project_ref(key.project)}/members/all/{user_id}"

        def level() -> int | None:
            try:
                member = self._http.gl.projects.get(key.project, lazy=True).members_all.get(user_id)
            except GitlabError as error:
                if error.response_code == 404:
                    return None
                raise
            return int(member.access_level)

        return permission_for_access_level(await self._http.call(f"GET {path}", level))

    async def _user_id(self, username: str) -> int | None:
        with self._lock:
            if username in self._user_ids:
                return self._user_ids[username]

        def lookup() -> int | None:
            users = self._http.gl.users.list(username=username, per_page=PER_PAGE, get_all=False)
            return next((int(user.id) for user in users if user.username == username), None)

        user_id = await self._http.call("GET /users", lookup)
        with self._lock:
            self._user_ids[username] = user_id
        return user_id

    async def find_trigger_user(self, key: TaskKey, label: str | None = None) -> str | None:
        """The user of the newest `add` event of `bot_label` (or `label`), from the resource label events."""
        path = item_path(key) + "/resource_label_events"
        events = await self._http.call(f"GET {path}", lambda: self._http.get_all(path))
        bot_label = label or self.config.bot_label
        newest_first = sorted(events, key=lambda e: (e.get("created_at") or "", e.get("id") or 0), reverse=True)
        for event in newest_first:
            if event.get("action") == "add" and (event.get("label") or {}).get("name") == bot_label:
                return (event.get("user") or {}).get("username")
        return None

    # -- delivery (SPEC 7) ------------------------------------------------------------

    async def reply_in_thread(self, key: TaskKey, thread_id: str, body: str) -> Comment:
        """A note on the same discussion (`Thread.id` is the discussion id)."""
        path = f"{item_path(key)}/discussions/{thread_id}/notes"
        marker = new_marker()
        text = marked(_body(body), marker)

        def create() -> JSON:
            item = self._http.manager(key).get(key.number, lazy=True)
            return dict(item.discussions.get(thread_id, lazy=True).notes.create({"body": text}).attributes)

        async def find() -> JSON | None:
            listing = item_path(key) + "/discussions"
            discussions = await self._http.call(f"GET {listing}", lambda: self._http.get_all(listing))
            notes = [note for d in discussions if str(d.get("id")) == thread_id for note in d.get("notes") or []]
            return next((note for note in notes if has_marker(note.get("body"), marker)), None)

        return to_comment(await self._http.create(f"POST {path}", create, find), thread_id)

    async def clone_url(self, project: str) -> str:
        """Asked once per project for the process's life: every run of a project clones
        from the same place. A project renamed or moved meanwhile is still cloned from the
        URL first read (GitLab redirects the old one) until the agent restarts."""
        return await self._clone_urls.get(project, lambda: self._read_clone_url(project))

    async def _read_clone_url(self, project: str) -> str:
        path = f"/projects/{project_ref(project)}"
        data = await self._http.call(f"GET {path}", lambda: dict(self._http.gl.projects.get(project).attributes))
        url = data.get("http_url_to_repo")
        if not isinstance(url, str) or not url:
            raise ForgeError(f"gitlab GET {path}: the project has no http_url_to_repo")
        return url

    # -- setup script (SPEC 7.1) ----------------------------------------------------

    async def read_default_branch_file(self, project: str, path: str) -> bytes | None:
        """`path` on the project's default branch (never an MR head), or None when absent."""
        where = f"/projects/{project_ref(project)}/repository/files"

        def read() -> bytes | None:
            handle = self._http.gl.projects.get(project)
            try:
                return bytes(handle.files.get(file_path=path, ref=handle.default_branch).decode())
            except GitlabError as error:
                if error.response_code == 404:
                    return None
                raise

        return await self._http.call(f"GET {where}", read)

    async def repository_id(self, project: str) -> str:
        path = f"/projects/{project_ref(project)}"
        data = await self._http.call(f"GET {path}", lambda: dict(self._http.gl.projects.get(project).attributes))
        number = data.get("id")
        if not isinstance(number, int):
            raise ForgeError(f"gitlab GET {path}: the project has no id")
        return f"gitlab {instance_url(self.config.api_url)} {number}"

    def git_http_auth(self) -> str | None:
        """HTTP Basic with user `oauth2` and the token as password (GitLab ignores the user for PATs)."""
        if not self._http.token:
            return None
        credentials = base64.b64encode(f"oauth2:{self._http.token}".encode()).decode()
        return f"Authorization: Basic {credentials}"

    async def git_identity(self, username: str | None) -> GitIdentity:
        """Name and commit/public email; else GitLab's no-reply `<id>-<username>@users.noreply.<host>`.

        The bot's own (None) is read once for the process's life: it commits every run's
        work, and a change of its profile shows in commits after the agent restarts.
        Anyone else's (a co-author) is read at each delivery.
        """
        if username is None:
            return await self._bot_identity.get("", lambda: self._read_identity(None))
        return await self._read_identity(username)

    async def _read_identity(self, username: str | None) -> GitIdentity:
        if username is None:
            data: JSON | None = await self._http.call("GET /user", lambda: self._http.get("/user", conditional=False).data)
        else:

            def lookup() -> JSON | None:
                users = self._http.gl.users.list(username=username, per_page=PER_PAGE, get_all=False)
                return next((dict(user.attributes) for user in users if user.username == username), None)

            data = await self._http.call("GET /users", lookup)
        if not data:
            raise ForgeError(f"gitlab user {username} not found")
        host = urlsplit(instance_url(self.config.api_url)).hostname or "gitlab.com"
        email = data.get("commit_email") or data.get("public_email") or data.get("email")
        email = email or f"{data.get('id', 0)}-{data['username']}@users.noreply.{host}"
        return GitIdentity.from_profile(str(data.get("name") or data["username"]), str(email), str(data["username"]))

    async def find_open_change(self, project: str, head_branch: str) -> ChangeRequest | None:
        path = f"/projects/{project_ref(project)}/merge_requests"

        def listing() -> list[JSON]:
            manager = self._http.gl.projects.get(project, lazy=True).mergerequests
            found = manager.list(source_branch=head_branch, state="opened", per_page=PER_PAGE, get_all=False)
            return [dict(mr.attributes) for mr in found]

        requests_ = [mr for mr in await self._http.call(f"GET {path}", listing) if mr.get("source_branch") == head_branch]
        same_project = [mr for mr in requests_ if mr.get("source_project_id") in (None, mr.get("target_project_id"))]
        return to_change(same_project[0]) if same_project else None

    async def open_change(self, project: str, head_branch: str, base_branch: str, title: str, body: str) -> ChangeRequest:
        """A draft MR: GitLab marks drafts by the `Draft:` title prefix."""
        path = f"/projects/{project_ref(project)}/merge_requests"
        fields = {
            "source_branch": head_branch,
            "target_branch": base_branch,
            "title": neutralise_quick_actions(title if title.lower().startswith("draft:") else f"Draft: {title}"),
            "description": _body(body),
        }

        def create() -> JSON:
            return dict(self._http.gl.projects.get(project, lazy=True).mergerequests.create(fields).attributes)

        async def find() -> JSON | None:
            found = await self.find_open_change(project, head_branch)
            return {"iid": found.number, "web_url": found.url, "source_branch": found.head_branch,
                    "target_branch": found.base_branch, "description": found.body, "draft": found.draft,
                    "sha": found.head_sha} if found else None

        return to_change(await self._http.create(f"POST {path}", create, find))

    async def update_change(self, project: str, number: int, body: str) -> ChangeRequest:
        path = f"/projects/{project_ref(project)}/merge_requests/{number}"

        def update() -> JSON:
            fields = {"description": _body(body)}
            return dict(self._http.gl.projects.get(project, lazy=True).mergerequests.update(number, fields))

        return to_change(await self._http.call(f"PUT {path}", update))

    def session(self) -> AbstractAsyncContextManager[object]:
        """`Source.session`: python-gitlab keeps one HTTP session for the client's life already."""
        return nullcontext()

    async def aclose(self) -> None:
        await self._http.aclose()

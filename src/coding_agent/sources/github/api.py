"""The GitHub task source: the REST calls behind the `Source` protocol.

The request path (retries, timeouts, the conditional-request cache, error translation)
is `client.py`; what GitHub's answers mean in domain terms is `mapping.py`. This module
says which endpoints answer each `Source` question. (Over 300 lines: one method per
`Source` operation, each a few lines; splitting them would scatter the protocol.)
"""

from __future__ import annotations

import asyncio
import base64
import logging
from collections.abc import AsyncGenerator, AsyncIterator, Iterable
from contextlib import asynccontextmanager
from datetime import UTC, datetime
from functools import partial
from typing import Any, cast
from urllib.parse import quote, urlsplit

from githubkit import Response
from githubkit.utils import UNSET

from coding_agent.config import GitHubConfig, LabelConfig
from coding_agent.domain.ci import Check, CheckKind, CiReport
from coding_agent.domain.delivery import ChangeRequest, GitIdentity
from coding_agent.domain.tasks import Comment, Forge, Permission, Task, TaskKey, TaskKind, Thread, canonical_project
from coding_agent.errors import ForgeError
from coding_agent.retry import RetryPolicy
from coding_agent.sources.ci_logs import last_lines, tail_budget
from coding_agent.sources.github.app_auth import INSTALLATION_HEADER, AppTokens
from coding_agent.sources.github.client import PER_PAGE, GitHubClient, GitHubNotFoundError, Sleep, has_next_page
from coding_agent.sources.github.mapping import (
    MAX_BODY_LENGTH,
    MAX_TITLE_LENGTH,
    build_search_query,
    check_output_text,
    comment_from_json,
    comment_id as parse_comment_id,
    given,
    logins,
    permission_of,
    project_of,
    segment,
    split_project,
    to_change,
    to_ci_report,
    to_comment,
    to_task,
    trigger_actor,
)
from coding_agent.sources.http import LifetimeAnswers, since_the_hour
from coding_agent.sources.writes import cap_body, has_marker, marked, new_marker

__all__ = ["GitHubSource"]

log = logging.getLogger(__name__)

# GitHub serves at most 1000 search results (10 pages of 100).
_MAX_SEARCH_PAGES = 10
_READY_FOR_REVIEW = """
mutation($id: ID!) {
  markPullRequestReadyForReview(input: {pullRequestId: $id}) { pullRequest { isDraft } }
}
"""


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
        token = config.token.get_secret_value() if config.token is not None else ""
        app = AppTokens(config.app, config.api_url, config.owner, timeout) if config.app is not None else None
        self._http = GitHubClient(token, config.api_url, retry, sleep, timeout, app)
        self._rest = self._http.rest
        self._known_labels: dict[str, set[str]] = {}
        self._clone_urls: LifetimeAnswers[str] = LifetimeAnswers()
        self._bot_identity: LifetimeAnswers[GitIdentity] = LifetimeAnswers()
        self._labels_made: LifetimeAnswers[None] = LifetimeAnswers()
        # A GitHub App's installation id -> the repositories it held at its last look (lowercase).
        self._installed: dict[int, set[str]] = {}

    # ------------------------------------------------------------ discovery and snapshots

    async def learn_identity(self) -> None:
        """A GitHub App's bot is `<slug>[bot]` (`GET /app`, read once), unless `bot_name` is set."""
        if self._http.app is not None and not self.bot_name:
            self.bot_name = await self._http.app.bot_login()

    def scope_changed(self) -> None:
        """A GitHub App's installation changed (a webhook): its tokens and installations
        are read again at the next request (the repository list is re-read each poll)."""
        if self._http.app is not None:
            self._http.app.forget_all()
            self._installed.clear()

    async def _scopes(self) -> list[tuple[int | None, GitHubConfig]]:
        """What each search covers: the configured scope with a token; with a GitHub App,
        each installation in scope (not suspended), as its account (and the configured
        repositories on it), searched with its own token."""
        app = self._http.app
        if app is None:
            return [(None, self._config)]
        scopes: list[tuple[int | None, GitHubConfig]] = []
        for installation in await app.in_scope(self._config.accounts()):
            account = installation.account.casefold()
            repos = [repo for repo in self._config.full_repos() if repo.split("/", 1)[0].casefold() == account]
            scope = self._config.model_copy(update={"owner": installation.account, "repos": repos})
            scopes.append((installation.id, scope))
        return scopes

    async def discover(self) -> list[Task]:
        await self.learn_identity()
        found: list[Task] = []
        for installation, scope in await self._scopes():
            tasks = [task async for page in self._search(*build_search_query(scope), installation) for task in page]
            if installation is not None:
                # A search also finds public repositories the app was never installed on.
                installed = await self._installed_repositories(installation)
                tasks = [task for task in tasks if task.key.project.lower() in installed]
            found += tasks
        return found

    async def refusal(self, project: str) -> str | None:
        """Why a GitHub App does not work `project` (None: it does): no installation in
        scope holds it, or its installation is suspended. Asked before a queue message's
        claim, with no request naming the repository; the repository list is read again
        (a 304 when unchanged) when the last one lacked it."""
        app = self._http.app
        if app is None:
            return None
        owner = project.split("/", 1)[0]
        installation = await app.holder(owner)
        if installation is None:
            return f"the GitHub App is not installed on {owner}"
        if installation.suspended:
            return f"installation {installation.id} on {installation.account} is suspended"
        names = self._installed.get(installation.id)
        if names is None or project.lower() not in names:
            names = await self._installed_repositories(installation.id)
        return None if project.lower() in names else f"{project} is not among installation {installation.id}'s repositories"

    async def _installed_repositories(self, installation: int) -> set[str]:
        """A GitHub App's installation's repositories now (a search also finds public
        repositories the app was never installed on). Revalidated each poll with the
        cache's ETag: a 304 when nothing changed."""
        names: set[str] = set()
        headers = {INSTALLATION_HEADER: str(installation)}
        for page in range(1, 101):
            data = await self._http.get_path_json(
                "/installation/repositories", {"per_page": PER_PAGE, "page": page}, headers
            )
            chunk = data.get("repositories") if isinstance(data, dict) else None
            if not isinstance(chunk, list):
                raise ForgeError("github GET /installation/repositories: unexpected response shape")
            names.update(str(repo.get("full_name", "")).lower() for repo in chunk if isinstance(repo, dict))
            if len(chunk) < PER_PAGE:
                break
        self._installed[installation] = names
        return names

    async def discover_followups(self, since: datetime) -> AsyncGenerator[list[Task], None]:
        """One search: done items that @mention the bot, updated since `since`."""
        if not self.bot_name:
            return
        stamp = since_the_hour(since).strftime("%Y-%m-%dT%H:%M:%SZ")
        mention = self.bot_name.removesuffix("[bot]")  # an app's bot is mentioned by its slug
        query = f"{self._config.query} mentions:{mention} updated:>={stamp}".strip()
        for installation, scope in await self._scopes():
            scope = scope.model_copy(update={"bot_label": self._config.done_label, "query": query})
            async for page in self._search(*build_search_query(scope), installation):
                yield page

    async def discover_review_followups(self, since: datetime) -> AsyncGenerator[list[Task], None]:
        """One search: open PRs the bot opened, updated since `since` (review threads, SPEC 3)."""
        if not self.bot_name:
            return
        stamp = since_the_hour(since).strftime("%Y-%m-%dT%H:%M:%SZ")
        head = ["is:pr", "is:open", f"author:{self.bot_name}", f"updated:>={stamp}"]
        for installation, scope in await self._scopes():
            async for page in self._search(*build_search_query(scope, head), installation):
                yield page

    async def _search(
        self, query: str, keep: frozenset[str] | None, installation: int | None = None
    ) -> AsyncGenerator[list[Task], None]:
        """One issue search, page by page (`keep`: the repositories to keep of a widened
        query; `installation`: a GitHub App's installation whose token searches)."""
        search = self._rest.search.async_issues_and_pull_requests
        headers = {INSTALLATION_HEADER: str(installation)} if installation is not None else None
        for page in range(1, _MAX_SEARCH_PAGES + 1):
            response = await self._http.call(
                "GET", "/search/issues", partial(search, q=query, per_page=PER_PAGE, page=page, headers=headers)
            )
            result = self._http.data(response, "GET", "/search/issues")
            tasks: list[Task] = []
            for item in result.items:
                project = project_of(item.repository_url)
                if keep is not None and project.lower() not in keep:
                    continue
                try:
                    canonical_project("github", project)
                except ValueError as error:  # no task key names it (SPEC 15): the poll goes on
                    log.warning("poll: refused: %s", error)
                    continue
                kind = TaskKind.CHANGE if given(item.pull_request) is not None else TaskKind.ISSUE
                task = to_task(project, kind, item)
                self._remember_labels(project, task.labels)
                tasks.append(task)
            last = not has_next_page(response, len(result.items)) or page * PER_PAGE >= result.total_count
            del response, result  # this page's answer is not held while the caller deals with its tasks
            yield tasks
            if last:
                return

    async def get_task(self, key: TaskKey) -> Task:
        owner, repo = split_project(key.project)
        if not key.is_change:
            path = f"/repos/{key.project}/issues/{key.number}"
            issue = await self._http.get(path, lambda: self._rest.issues.async_get(owner, repo, key.number))
            task = to_task(key.project, key.kind, issue)
        else:
            path = f"/repos/{key.project}/pulls/{key.number}"
            pull = await self._http.get(path, lambda: self._rest.pulls.async_get(owner, repo, key.number))
            head_repo = given(pull.head.repo)
            extra = {"head_sha": pull.head.sha, "draft": str(bool(given(pull.draft)))}
            if head_repo is not None:
                extra["head_repo"] = head_repo.full_name
            task = to_task(key.project, key.kind, pull, head_branch=pull.head.ref, base_branch=pull.base.ref, extra=extra)
        self._remember_labels(key.project, task.labels)
        return task

    async def get_assignees(self, key: TaskKey) -> list[str]:
        owner, repo = split_project(key.project)
        path = f"/repos/{key.project}/issues/{key.number}"
        issue = await self._http.get(path, lambda: self._rest.issues.async_get(owner, repo, key.number))
        return list(logins(issue.assignees))

    async def get_authenticated_login(self) -> str:
        """The login the token belongs to (for `doctor`, or to learn the bot name)."""
        user = await self._http.get("/user", self._rest.users.async_get_authenticated)
        return user.login

    # ------------------------------------------------------------ comments and threads

    async def _raw_comments(self, key: TaskKey) -> list[Any]:
        owner, repo = split_project(key.project)
        return await self._http.get_pages(
            f"/repos/{key.project}/issues/{key.number}/comments",
            lambda page: self._rest.issues.async_list_comments(owner, repo, key.number, per_page=PER_PAGE, page=page),
        )

    async def _raw_review_comments(self, key: TaskKey) -> list[Any]:
        owner, repo = split_project(key.project)
        return await self._http.get_pages(
            f"/repos/{key.project}/pulls/{key.number}/comments",
            lambda page: self._rest.pulls.async_list_review_comments(
                owner, repo, key.number, per_page=PER_PAGE, page=page
            ),
        )

    async def list_comments(self, key: TaskKey, since: datetime | None = None) -> list[Comment]:
        owner, repo = split_project(key.project)
        path = f"/repos/{key.project}/issues/{key.number}/comments"
        # GitHub's timestamps are whole seconds, and `since` keeps those at or after it.
        after = since.astimezone(UTC).replace(microsecond=0) if since is not None else UNSET
        result = await self._http.get_json_pages(
            path if since is None else f"{path}?since={after}",
            lambda page: self._rest.issues.async_list_comments(
                owner, repo, key.number, since=after, per_page=PER_PAGE, page=page
            ),
            comment_from_json,
        )
        return sorted(result, key=lambda c: (c.created_at, int(c.id)))

    async def list_threads(self, key: TaskKey) -> list[Thread]:
        if not key.is_change:
            return []
        review_comments = await self._raw_review_comments(key)
        review_comments.sort(key=lambda c: (c.created_at, c.id))
        present = {c.id for c in review_comments}
        grouped: dict[int, list[Any]] = {}
        for c in review_comments:
            parent = given(c.in_reply_to_id)
            root = parent if parent in present else c.id
            grouped.setdefault(root, []).append(c)
        threads = []
        for root, members in grouped.items():
            first = members[0]
            comments = tuple(to_comment(c, str(root)) for c in members)
            line = given(first.line) or given(first.original_line)
            threads.append(Thread(id=str(root), comments=comments, path=first.path, line=line))
        return threads

    async def post_comment(self, key: TaskKey, body: str) -> Comment:
        owner, repo = split_project(key.project)
        path = f"/repos/{key.project}/issues/{key.number}/comments"
        marker = new_marker()
        text = marked(cap_body(body, MAX_BODY_LENGTH), marker)

        async def find() -> Comment | None:
            found = next((c for c in await self._raw_comments(key) if has_marker(given(c.body), marker)), None)
            return to_comment(found) if found is not None else None

        created: Comment = await self._http.create(
            path,
            lambda: self._rest.issues.async_create_comment(owner, repo, key.number, body=text),
            find,
            comment_from_json,
        )
        return created

    async def edit_comment(self, key: TaskKey, comment_id: str, body: str) -> None:
        owner, repo = split_project(key.project)
        number = parse_comment_id(comment_id)
        path = f"/repos/{key.project}/issues/comments/{number}"
        text = cap_body(body, MAX_BODY_LENGTH)
        await self._http.call("PATCH", path, lambda: self._rest.issues.async_update_comment(owner, repo, number, body=text))

    async def reply_in_thread(self, key: TaskKey, thread_id: str, body: str) -> Comment:
        """Answer in a PR review thread (SPEC 7: a run started in a thread replies there)."""
        owner, repo = split_project(key.project)
        root = parse_comment_id(thread_id)
        path = f"/repos/{key.project}/pulls/{key.number}/comments/{root}/replies"
        marker = new_marker()
        text = marked(cap_body(body, MAX_BODY_LENGTH), marker)

        async def find() -> Any | None:
            return next((c for c in await self._raw_review_comments(key) if has_marker(c.body, marker)), None)

        reply = await self._http.create(
            path,
            lambda: self._rest.pulls.async_create_reply_for_review_comment(owner, repo, key.number, root, body=text),
            find,
        )
        return to_comment(reply, thread_id)

    # ------------------------------------------------------------ delivery

    async def _json_object(self, path: str, send: Any) -> dict[str, Any]:
        data = await self._http.get_json(path, send)
        if not isinstance(data, dict):
            raise ForgeError(f"github GET {path}: unexpected response shape")
        return data

    async def clone_url(self, project: str) -> str:
        """Asked once per repository for the process's life: every run of a project clones
        from the same place. A repository renamed or moved meanwhile is still cloned from
        the URL first read (GitHub redirects the old one) until the agent restarts."""
        return await self._clone_urls.get(project.lower(), lambda: self._read_clone_url(project))

    async def _read_clone_url(self, project: str) -> str:
        owner, repo = split_project(project)
        data = await self._json_object(f"/repos/{project}", lambda: self._rest.repos.async_get(owner, repo))
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
        owner, repo = split_project(project)
        info = await self._json_object(f"/repos/{project}", lambda: self._rest.repos.async_get(owner, repo))
        branch = info.get("default_branch")
        if not isinstance(branch, str) or not branch:
            raise ForgeError(f"github GET /repos/{project}: the repository has no default_branch")
        where = f"/repos/{project}/contents/{path}"
        try:
            quoted = quote(path, safe="/")
            data = await self._json_object(where, lambda: self._rest.repos.async_get_content(owner, repo, quoted, ref=branch))
        except GitHubNotFoundError:
            return None
        if data.get("type") != "file" or data.get("encoding") != "base64" or not isinstance(data.get("content"), str):
            raise ForgeError(f"github GET {where}: not a file")
        return base64.b64decode(data["content"])

    async def repository_id(self, project: str) -> str:
        owner, repo = split_project(project)
        data = await self._json_object(f"/repos/{project}", lambda: self._rest.repos.async_get(owner, repo))
        number = data.get("id")
        if not isinstance(number, int):
            raise ForgeError(f"github GET /repos/{project}: the repository has no id")
        return f"github {self._config.api_url.rstrip('/')} {number}"

    def git_http_auth(self) -> str | None:
        """HTTP Basic with `x-access-token` as the user: what GitHub accepts from PATs and app tokens."""
        if not self._http.token:
            return None
        credentials = base64.b64encode(f"x-access-token:{self._http.token}".encode()).decode()
        return f"Authorization: Basic {credentials}"

    async def git_http_auth_for(self, project: str) -> str | None:
        """The header git sends for `project` now: a GitHub App's token narrowed to that
        repository, renewed before it expires (the host asks before every git command)."""
        if self._http.app is not None:
            return await self._http.app.git_header(project)
        return self.git_http_auth()

    async def git_identity(self, username: str | None) -> GitIdentity:
        """Profile name and public email; else GitHub's no-reply address `<id>+<login>@users.noreply.<host>`.

        The bot's own (None) is read once for the process's life: it commits every run's
        work, and a change of its profile shows in commits after the agent restarts.
        Anyone else's (a co-author) is read at each delivery.
        """
        if username is None:
            return await self._bot_identity.get("", lambda: self._read_identity(None))
        return await self._read_identity(username)

    async def _read_identity(self, username: str | None) -> GitIdentity:
        if username is None and self._http.app is not None:
            # An installation token has no user behind it (GitHub answers `GET /user` with
            # 403): the app's bot is read by its login, as anyone's profile is.
            username = await self._http.app.bot_login()
        if username is None:
            data = await self._json_object("/user", self._rest.users.async_get_authenticated)
        else:
            data = await self._json_object(
                f"/users/{username}", lambda: self._rest.users.async_get_by_username(segment(username))
            )
        login = str(data.get("login") or username or "coding-agent")
        host = urlsplit(self._config.api_url).hostname or "github.com"
        host = "github.com" if host == "api.github.com" else host
        email = data.get("email") or f"{data.get('id', 0)}+{login}@users.noreply.{host}"
        return GitIdentity.from_profile(str(data.get("name") or login), str(email), login)

    async def find_open_change(self, project: str, head_branch: str) -> ChangeRequest | None:
        owner, repo = split_project(project)
        pulls = await self._http.get(
            f"/repos/{project}/pulls",
            lambda: self._rest.pulls.async_list(owner, repo, state="open", head=f"{owner}:{head_branch}", per_page=PER_PAGE),
        )
        matching = [pull for pull in cast("list[Any]", pulls) if pull.head.ref == head_branch]
        return to_change(matching[0]) if matching else None

    async def open_change(self, project: str, head_branch: str, base_branch: str, title: str, body: str) -> ChangeRequest:
        owner, repo = split_project(project)
        text = cap_body(body, MAX_BODY_LENGTH)

        async def send() -> Response[Any]:
            return await self._rest.pulls.async_create(
                owner, repo, title=title[:MAX_TITLE_LENGTH], head=head_branch, base=base_branch, body=text, draft=True
            )

        async def find() -> ChangeRequest | None:
            return await self.find_open_change(project, head_branch)

        created = await self._http.create(f"/repos/{project}/pulls", send, find)
        return created if isinstance(created, ChangeRequest) else to_change(created)

    async def update_change(self, project: str, number: int, body: str) -> ChangeRequest:
        owner, repo = split_project(project)
        path = f"/repos/{project}/pulls/{number}"
        text = cap_body(body, MAX_BODY_LENGTH)
        response = await self._http.call("PATCH", path, lambda: self._rest.pulls.async_update(owner, repo, number, body=text))
        return to_change(self._http.data(response, "PATCH", path))

    # ------------------------------------------------------------ CI feedback (SPEC 16)

    async def ci_report(self, project: str, sha: str) -> CiReport:
        """Two conditional GETs, side by side: the check runs (newest of each name) and the
        combined status. An unknown sha (404, or GitHub's 422 "No commit found") is empty."""
        owner, repo = split_project(project)
        checks = self._rest.checks.async_list_for_ref
        status = self._rest.repos.async_get_combined_status_for_ref
        try:
            runs, combined = await asyncio.gather(
                self._http.get_json(
                    f"/repos/{project}/commits/{sha}/check-runs",
                    lambda: checks(owner, repo, segment(sha), per_page=PER_PAGE),
                ),
                self._http.get_json(
                    f"/repos/{project}/commits/{sha}/status",
                    lambda: status(owner, repo, segment(sha), per_page=PER_PAGE),
                ),
            )
        except GitHubNotFoundError:
            return CiReport(project, sha)
        except ForgeError as error:
            if "HTTP 422" in str(error):
                return CiReport(project, sha)
            raise
        return to_ci_report(project, sha, runs, combined)

    async def ci_log_tail(self, project: str, check: Check, lines: int) -> str | None:
        if check.kind is CheckKind.GITHUB_ACTIONS_JOB:
            return await self._job_log_tail(project, check, lines)
        if check.kind is not CheckKind.GITHUB_CHECK_RUN:
            return None
        owner, repo = split_project(project)
        where = f"/repos/{project}/check-runs/{check.id}"
        try:
            run = await self._json_object(where, lambda: self._rest.checks.async_get(owner, repo, int(check.id)))
            notes: Any = []
            if ((run.get("output") or {}).get("annotations_count") or 0) > 0:
                notes = await self._http.get_json(
                    f"{where}/annotations",
                    lambda: self._rest.checks.async_list_annotations(owner, repo, int(check.id), per_page=PER_PAGE),
                )
        except GitHubNotFoundError:
            return None
        return last_lines(check_output_text(run, notes).encode(), lines, starts_mid_line=False)

    async def _job_log_tail(self, project: str, check: Check, lines: int) -> str | None:
        """The job log's last `lines` lines: GitHub redirects to the log's blob, which is
        asked for its last bytes only (`tail_budget`)."""
        owner, repo = split_project(project)
        budget = tail_budget(lines)
        download = self._rest.actions.async_download_job_logs_for_workflow_run
        try:
            response = await self._http.call(
                "GET",
                f"/repos/{project}/actions/jobs/{check.id}/logs",
                lambda: download(owner, repo, int(check.id), headers={"Range": f"bytes=-{budget}"}),
            )
        except GitHubNotFoundError:
            return None
        except ForgeError as error:
            if "HTTP 410" in str(error):  # expired
                return None
            raise
        raw = response.raw_response
        whole = raw.status_code == 206 and raw.headers.get("content-range", "").startswith("bytes 0-")
        return last_lines(raw.content, lines, starts_mid_line=not whole and len(raw.content) >= budget)

    async def ci_rerun(self, project: str, check: Check) -> bool:
        """Re-run the failed jobs of the check's workflow run (read from its job when the
        check's URL did not name it); False for what is no Actions job, or a refusal."""
        if check.kind is not CheckKind.GITHUB_ACTIONS_JOB:
            return False
        owner, repo = split_project(project)
        try:
            run_id = check.rerun_id or await self._job_run_id(project, check.id)
            path = f"/repos/{project}/actions/runs/{run_id}/rerun-failed-jobs"
            rerun = self._rest.actions.async_re_run_workflow_failed_jobs
            await self._http.call("POST", path, lambda: rerun(owner, repo, int(run_id)))
        except (ForgeError, ValueError):  # refused, or no such job or run (a TransientError goes up)
            return False
        return True

    async def _job_run_id(self, project: str, job_id: str) -> str:
        owner, repo = split_project(project)
        where = f"/repos/{project}/actions/jobs/{job_id}"
        get_job = self._rest.actions.async_get_job_for_workflow_run
        job = await self._json_object(where, lambda: get_job(owner, repo, int(job_id)))
        if not isinstance(job.get("run_id"), int):
            raise ForgeError(f"github GET {where}: the job has no run_id")
        return str(job["run_id"])

    async def mark_change_ready(self, project: str, number: int) -> None:
        """GitHub's REST API cannot undraft a PR: one GraphQL mutation does, on the PR's node id."""
        owner, repo = split_project(project)
        pull = await self._json_object(
            f"/repos/{project}/pulls/{number}", lambda: self._rest.pulls.async_get(owner, repo, number)
        )
        if not pull.get("draft"):
            return
        if not isinstance(pull.get("node_id"), str):
            raise ForgeError(f"github GET /repos/{project}/pulls/{number}: the pull request has no node_id")
        await self._http.graphql(_READY_FOR_REVIEW, {"id": pull["node_id"]})

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
        owner, repo = split_project(project)
        try:
            await self._http.call(
                "GET",
                f"/repos/{project}/labels/{label}",
                lambda: self._rest.issues.async_get_label(owner, repo, segment(label)),
            )
            return
        except GitHubNotFoundError:
            pass
        try:
            await self._http.call(
                "POST",
                f"/repos/{project}/labels",
                lambda: self._rest.issues.async_create_label(
                    owner, repo, name=label, color=self._label_color(label), description="Managed by coding-agent"
                ),
            )
        except ForgeError as error:
            if "HTTP 422" not in str(error):  # 422: created meanwhile by someone else
                raise

    async def add_label(self, key: TaskKey, label: str) -> None:
        known = self._known_labels.setdefault(key.project.lower(), set())
        if label.lower() not in known:
            # One check (and creation) for the runs that claim together, not one each.
            made = f"{key.project.lower()}\n{label.lower()}"
            await self._labels_made.get(made, lambda: self._ensure_label(key.project, label))
            known.add(label.lower())
        owner, repo = split_project(key.project)
        await self._http.call(
            "POST",
            f"/repos/{key.project}/issues/{key.number}/labels",
            lambda: self._rest.issues.async_add_labels(owner, repo, key.number, labels=[label]),
        )

    async def remove_label(self, key: TaskKey, label: str) -> None:
        owner, repo = split_project(key.project)
        try:
            await self._http.call(
                "DELETE",
                f"/repos/{key.project}/issues/{key.number}/labels/{label}",
                lambda: self._rest.issues.async_remove_label(owner, repo, key.number, segment(label)),
            )
        except GitHubNotFoundError:
            pass  # not on the issue: already the state we want

    # ------------------------------------------------------------ people

    async def get_permission(self, key: TaskKey, username: str) -> Permission:
        owner, repo = split_project(key.project)
        try:
            result = await self._http.get(
                f"/repos/{key.project}/collaborators/{username}/permission",
                lambda: self._rest.repos.async_get_collaborator_permission_level(owner, repo, segment(username)),
            )
        except GitHubNotFoundError:
            return Permission.NONE
        return permission_of(result)

    async def find_trigger_user(self, key: TaskKey, label: str | None = None) -> str | None:
        """The actor of the newest `labeled` (bot_label) or `assigned` (bot) event; with
        `label`, of the newest `labeled` event of that label (who added the stop label).

        Events are read as plain JSON: GitHub has more event types than githubkit's
        union of models, and one unknown type must not hide the trigger.
        """
        owner, repo = split_project(key.project)
        events: list[dict[str, Any]] = await self._http.get_json_pages(
            f"/repos/{key.project}/issues/{key.number}/events",
            lambda page: self._rest.issues.async_list_events(owner, repo, key.number, per_page=PER_PAGE, page=page),
        )
        if label is not None:
            return trigger_actor(events, label, None)
        return trigger_actor(events, self.labels.bot_label, self.bot_name)

    @asynccontextmanager
    async def session(self) -> AsyncIterator[None]:
        """githubkit's client for the block; as an app, also the run's own tokens (app_auth.py)."""
        await self.learn_identity()
        async with self._http.session():
            if self._http.app is None:
                yield
            else:
                with self._http.app.run_scope():
                    yield

    async def aclose(self) -> None:
        await self._http.aclose()

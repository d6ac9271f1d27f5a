"""GitHub's REST shapes (githubkit models, event JSON) mapped to the domain's types.

No I/O here: what a search item, issue, pull request, comment or permission answer
means for a `Task`, a `Comment` or a `Permission`, the one search query of a poll, and
what check runs and commit statuses (read as plain JSON: GitHub adds conclusions faster
than a model's enum follows) mean for a `CiReport`.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from datetime import datetime
from typing import Any
from urllib.parse import quote

from githubkit.utils import UNSET

from coding_agent.config import GitHubConfig
from coding_agent.domain.ci import Check, CheckKind, CheckState, CiReport
from coding_agent.domain.delivery import ChangeRequest
from coding_agent.domain.tasks import Comment, Permission, Task, TaskKey, TaskKind, canonical_project
from coding_agent.errors import ForgeError
from coding_agent.sources.writes import strip_marker

__all__ = [
    "MAX_BODY_LENGTH",
    "MAX_SEARCH_QUERY_LENGTH",
    "MAX_TITLE_LENGTH",
    "author",
    "build_search_query",
    "check_output_text",
    "comment_from_json",
    "comment_id",
    "given",
    "label_names",
    "logins",
    "permission_of",
    "project_of",
    "split_project",
    "to_change",
    "to_ci_report",
    "to_comment",
    "to_task",
    "trigger_actor",
]

# GitHub refuses (422) a comment or PR body longer than this, and a title over 256.
MAX_BODY_LENGTH = 65_536
MAX_TITLE_LENGTH = 256
# GitHub refuses a search `q` longer than this (422).
MAX_SEARCH_QUERY_LENGTH = 256

_ROLE_PERMISSIONS = {
    "admin": Permission.ADMIN,
    "maintain": Permission.WRITE,
    "write": Permission.WRITE,
    "triage": Permission.READ,
    "read": Permission.READ,
    "none": Permission.NONE,
}


def given(value: Any) -> Any:
    """githubkit marks absent optional fields with UNSET; treat them as None."""
    return None if value is UNSET else value


def build_search_query(config: GitHubConfig, head: list[str] | None = None) -> tuple[str, frozenset[str] | None]:
    """The one search `q` of a poll, and the repositories to keep when it had to widen.

    `repo:` qualifiers are OR-ed by GitHub, so one query covers every configured
    repository. When they would make `q` longer than GitHub accepts, the query asks for
    the owners' (`user:`) items instead and the returned set says which repositories to
    keep: still one query per poll, whatever the number of repositories. `head`: the
    qualifiers that pick the items (default: open and carrying `bot_label`).
    """
    repos = config.full_repos()
    head = head if head is not None else ["is:open", f'label:"{config.bot_label}"']
    tail = [f"assignee:{config.assignee}"] if config.assignee else []
    if config.query.strip():
        tail.append(config.query.strip())
    if not repos:
        if config.owner is None:  # a GitHub App's source searches each installation's account
            raise ValueError("a search needs github.owner or github.repos")
        return " ".join([*head, f"user:{config.owner}", *tail]), None
    query = " ".join([*head, *(f"repo:{repo}" for repo in repos), *tail])
    if len(query) <= MAX_SEARCH_QUERY_LENGTH:
        return query, None
    owners = sorted({repo.split("/", 1)[0] for repo in repos})
    return " ".join([*head, *(f"user:{owner}" for owner in owners), *tail]), frozenset(r.lower() for r in repos)


def split_project(project: str) -> tuple[str, str]:
    """Owner and repository of a canonical `owner/repo`, each quoted as one URL path
    segment: githubkit puts them into its paths as they are, and a `..` or `/` there
    would reach another repository (SPEC 15). A ForgeError names a project that is not
    canonical, before any request."""
    try:
        canonical_project("github", project)
    except ValueError as error:
        raise ForgeError(str(error)) from None
    owner, _, repo = project.partition("/")
    return segment(owner), segment(repo)


def segment(value: str) -> str:
    """`value` quoted as one URL path segment (a login, a sha, a label): githubkit does not
    quote what it is given."""
    return quote(value, safe="")


def project_of(repository_url: str) -> str:
    """`.../repos/owner/name` (also under GitHub Enterprise's /api/v3) -> `owner/name`."""
    return "/".join(repository_url.rstrip("/").split("/")[-2:])


def label_names(labels: Iterable[Any]) -> tuple[str, ...]:
    names = (label if isinstance(label, str) else given(getattr(label, "name", None)) for label in labels)
    return tuple(name for name in names if name)


def logins(users: Any) -> tuple[str, ...]:
    return tuple(user.login for user in (given(users) or ()) if user is not None)


def author(user: Any) -> str:
    # GitHub shows a deleted account as "ghost".
    return user.login if user is not None else "ghost"


def to_comment(c: Any, thread_id: str | None = None) -> Comment:
    """An issue or review comment as the domain sees it: without our hidden marker."""
    return Comment(
        id=str(c.id),
        author=author(given(c.user)),
        body=strip_marker(given(c.body) or ""),
        created_at=c.created_at,
        thread_id=thread_id,
    )


def comment_from_json(data: dict[str, Any]) -> Comment:
    """`to_comment` of an issue comment read as plain JSON (`GitHubClient.get_json_pages`)."""
    user = data.get("user")
    return Comment(
        id=str(int(data["id"])),
        author=str(user["login"]) if isinstance(user, dict) else "ghost",
        body=strip_marker(str(data.get("body") or "")),
        created_at=datetime.fromisoformat(data["created_at"]),
    )


def comment_id(text: str) -> int:
    try:
        return int(text)
    except ValueError:
        raise ForgeError(f"not a GitHub comment id: {text!r}") from None


def to_task(project: str, kind: TaskKind, item: Any, **extra: Any) -> Task:
    """A search item, issue or pull request as a `Task`."""
    return Task(
        key=TaskKey("github", project, kind, item.number),
        title=item.title,
        body=given(item.body) or "",
        author=author(given(item.user)),
        labels=label_names(item.labels),
        assignees=logins(item.assignees),
        url=item.html_url,
        created_at=item.created_at,
        updated_at=item.updated_at,
        state=str(item.state),
        **extra,
    )


def to_change(pull: Any) -> ChangeRequest:
    return ChangeRequest(
        number=pull.number,
        url=pull.html_url,
        head_branch=pull.head.ref,
        base_branch=pull.base.ref,
        body=given(pull.body) or "",
        draft=bool(given(pull.draft)),
        head_sha=given(pull.head.sha) or None,
    )


def permission_of(result: Any) -> Permission:
    """role_name holds the fine level (maintain, triage); custom roles fall back to `permission`."""
    return _ROLE_PERMISSIONS.get(result.role_name) or _ROLE_PERMISSIONS.get(result.permission, Permission.NONE)


def trigger_actor(events: list[dict[str, Any]], bot_label: str, bot_name: str | None) -> str | None:
    """The actor of the newest `labeled` (`bot_label`) or `assigned` (the bot) event."""
    label = bot_label.lower()
    bot = (bot_name or "").lower()
    for event in reversed(events):
        actor = (event.get("actor") or {}).get("login")
        if not actor:
            continue
        if event.get("event") == "labeled" and str((event.get("label") or {}).get("name", "")).lower() == label:
            return str(actor)
        assignee = str((event.get("assignee") or {}).get("login", "")).lower()
        if event.get("event") == "assigned" and bot and assignee == bot:
            return str(actor)
    return None


ACTIONS_APP = "github-actions"
_PASSED = frozenset({"success", "neutral", "skipped"})
_STATUS_STATES = {"success": CheckState.PASSED, "pending": CheckState.PENDING}
# An Actions job's page: /{owner}/{repo}/actions/runs/{run_id}/job/{job_id}
_ACTIONS_JOB_URL = re.compile(r"/actions/runs/(\d+)/job/(\d+)")


def _text(value: Any) -> str:
    return value if isinstance(value, str) else ""


def _check_run(run: dict[str, Any]) -> Check | None:
    """A check run as a `Check`: an Actions job (its id is the job's, its workflow run is
    what a re-run asks for) or another app's; None for what is no check run at all.

    Anything that is not a known conclusion of a completed run counts as failed: a new
    word GitHub adds must not read as green."""
    number = run.get("id")
    if not isinstance(number, int) or isinstance(number, bool):
        return None
    status, conclusion = _text(run.get("status")), _text(run.get("conclusion"))
    if status != "completed" or not conclusion:
        state, word = CheckState.PENDING, status or "pending"
    else:
        state, word = (CheckState.PASSED if conclusion in _PASSED else CheckState.FAILED), conclusion
    url = _text(run.get("html_url")) or _text(run.get("details_url")) or None
    app = run.get("app")
    slug = _text(app.get("slug")) if isinstance(app, dict) else ""
    job = _ACTIONS_JOB_URL.search(_text(run.get("details_url")) or _text(run.get("html_url")))
    if slug == ACTIONS_APP:
        kind, rerun = CheckKind.GITHUB_ACTIONS_JOB, job.group(1) if job else None
    else:
        kind, rerun = CheckKind.GITHUB_CHECK_RUN, None
    return Check(str(number), _text(run.get("name")) or str(number), kind, state, word, url, rerun)


def _status(status: dict[str, Any]) -> Check | None:
    """A commit status: its context is its id and name (GitHub keeps one per context)."""
    context, state = _text(status.get("context")), _text(status.get("state"))
    if not context or not state:
        return None
    folded = _STATUS_STATES.get(state, CheckState.FAILED)
    return Check(context, context, CheckKind.GITHUB_STATUS, folded, state, _text(status.get("target_url")) or None)


def to_ci_report(project: str, sha: str, check_runs: Any, combined: Any) -> CiReport:
    """Commit `sha`'s check runs (the list endpoint's body) and combined status, as one report."""
    runs = check_runs.get("check_runs") if isinstance(check_runs, dict) else None
    statuses = combined.get("statuses") if isinstance(combined, dict) else None
    checks = [_check_run(run) for run in runs or () if isinstance(run, dict)]
    checks += [_status(status) for status in statuses or () if isinstance(status, dict)]
    return CiReport(project, sha, tuple(check for check in checks if check is not None))


def check_output_text(run: Any, annotations: Any) -> str:
    """Another app's check run in words: its output (title, summary, text) and annotations,
    one line each (`path:line: level: title: message`)."""
    output = run.get("output") if isinstance(run, dict) else None
    output = output if isinstance(output, dict) else {}
    parts = [_text(output.get(field)).strip() for field in ("title", "summary", "text")]
    lines = [part for part in parts if part]
    for note in annotations if isinstance(annotations, list) else ():
        if not isinstance(note, dict):
            continue
        place = f"{_text(note.get('path'))}:{note.get('start_line')}"
        words = [_text(note.get(field)) for field in ("annotation_level", "title", "message")]
        lines.append(": ".join([place, *(word for word in words if word)]))
    return "\n".join(lines)

"""Delivery at done (SPEC 7): commit the workspace, push the branch, open or update the PR/MR.

The host does all of it, never the model: the commit's author is the bot (the token's
user) with a `Co-authored-by:` trailer naming the requester; the push goes to the
clone URL with the credential given to that one git command; then an open PR/MR whose
head is the branch is updated (its summary section rewritten), or a draft one is
opened that closes the issue. A workspace without changes delivers nothing: no
commit, no branch, no PR, and the answer comment is the result.

Every failure raises: a rejected push (`PushRejected`: non-fast-forward, 403, a
protected branch) or a failing forge call ends the run failed, with a comment that says
what was and was not done. Nothing is force-pushed, ever.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal

from coding_agent.domain.delivery import ChangeRequest, GitIdentity
from coding_agent.domain.tasks import Task
from coding_agent.errors import AgentError, ForgeError
from coding_agent.prompts.notices import Language
from coding_agent.retry import RetryPolicy, retry_async
from coding_agent.sources.base import Source
from coding_agent.workspace.checkout import Checkout, verify_git_dir
from coding_agent.workspace.git import Git, PushRejected

__all__ = [
    "Delivery",
    "deliver",
    "delivery_note",
    "commit_message",
    "change_body",
    "commit_all",
    "push_branch",
    "WorkspaceChanges",
    "workspace_changes",
    "SUMMARY_START",
    "SUMMARY_END",
]

log = logging.getLogger(__name__)

SUMMARY_START = "<!-- coding-agent:summary -->"
SUMMARY_END = "<!-- /coding-agent:summary -->"
_SUBJECT_MAX = 72


@dataclass(frozen=True)
class Delivery:
    """What delivery did: nothing, pushed to a PR/MR's own branch, or opened/updated a PR/MR."""

    action: Literal["none", "pushed", "opened", "updated"]
    branch: str | None = None
    commit: str | None = None
    change: ChangeRequest | None = None


def commit_message(task: Task, summary: str, coauthor: GitIdentity | None) -> str:
    """Subject from the summary's first line, the summary as body, and the co-author trailer."""
    lines = [line.strip() for line in summary.strip().splitlines()]
    first = next((line for line in lines if line), "")
    subject = re.sub(r"^[#>*\-\s]+", "", first).strip() or f"Work on {task.key}: {task.title}"
    if len(subject) > _SUBJECT_MAX:
        subject = subject[: _SUBJECT_MAX - 3].rsplit(" ", 1)[0] + "..."
    parts = [subject]
    rest = "\n".join(lines[lines.index(first) + 1 :]).strip() if first else ""
    body = summary.strip() if len(first) > _SUBJECT_MAX else rest
    if body:
        parts.append(body)
    if coauthor is not None:
        parts.append(f"Co-authored-by: {coauthor}")
    return "\n\n".join(parts) + "\n"


def change_body(task: Task, summary: str, requester: str | None, run_uuid: str, previous: str | None = None) -> str:
    """The PR/MR description: `Closes #N`, the run's summary between markers, and a footer.

    On an update only the part between the markers is replaced, so what people added to
    the description stays.
    """
    section = f"{SUMMARY_START}\n{summary.strip() or '(no summary)'}\n{SUMMARY_END}"
    if previous is not None:
        start, end = previous.find(SUMMARY_START), previous.find(SUMMARY_END)
        if 0 <= start < end:
            return previous[:start] + section + previous[end + len(SUMMARY_END) :]
        return previous.rstrip() + "\n\n" + section
    who = f" for @{requester}" if requester else ""
    footer = f"---\n_Opened by coding-agent{who} (run `{run_uuid}`). Review it, then mark it ready._"
    return f"Closes #{task.key.number}\n\n{section}\n\n{footer}"


@dataclass(frozen=True)
class WorkspaceChanges:
    """What the run left in its clone: uncommitted changes, and commits since its start."""

    dirty: bool
    committed: bool
    head: str | None  # the clone's HEAD commit (None: no commit yet, an empty repository)


async def workspace_changes(git: Git, checkout: Checkout) -> WorkspaceChanges:
    """The clone's state from one `git status` (porcelain v2 names HEAD's commit too)."""
    status = await git.run(checkout.path, "status", "--porcelain=v2", "--branch", "--untracked-files=all")
    lines = status.stdout.splitlines()
    oid = next((line.split()[2] for line in lines if line.startswith("# branch.oid ")), "(initial)")
    head = None if oid == "(initial)" else oid
    dirty = any(line and not line.startswith("#") for line in lines)
    return WorkspaceChanges(dirty, (head or "") != checkout.start_sha, head)


def _push_failure(branch: str, stderr: str, fallback: AgentError) -> AgentError:
    lowered = stderr.lower()
    if "non-fast-forward" in lowered or "fetch first" in lowered or "[rejected]" in lowered:
        return PushRejected(
            f"the push to `{branch}` was rejected: the branch moved on the forge since the run started "
            "(non-fast-forward). Nothing was overwritten; the run's commit was not delivered."
        )
    if "returned error: 403" in lowered or ("permission" in lowered and "denied" in lowered):
        return PushRejected(
            f"the forge refused the push to `{branch}` (HTTP 403): the bot's token may lack write access, "
            "or the branch is protected. The run's commit was not delivered."
        )
    if "[remote rejected]" in lowered:
        reason = stderr[lowered.index("[remote rejected]") :].splitlines()[0]
        return PushRejected(f"the forge rejected the push to `{branch}`: {reason}. The run's commit was not delivered.")
    return fallback


async def push_branch(git: Git, checkout: Checkout, retry: RetryPolicy) -> None:
    """Push HEAD to the run's branch: never forced, the credential only in git's environment."""
    args = ("push", "--no-verify", "--porcelain", checkout.clone_url, f"HEAD:refs/heads/{checkout.branch}")

    async def attempt() -> None:
        result = await git.run(checkout.path, *args, auth=checkout.auth, check=False)
        if result.returncode != 0:
            raise _push_failure(checkout.branch, result.stdout + "\n" + result.stderr, git.failure("git push", result))

    await retry_async(attempt, retry, "git push")


async def commit_all(git: Git, checkout: Checkout, message: str, author: GitIdentity) -> None:
    """Commit everything in the work tree (the repository's ignores and ours apply) as `author`."""
    identity = {
        "GIT_AUTHOR_NAME": author.name,
        "GIT_AUTHOR_EMAIL": author.email,
        "GIT_COMMITTER_NAME": author.name,
        "GIT_COMMITTER_EMAIL": author.email,
    }
    await git.run(checkout.path, "add", "--all")
    await git.run(checkout.path, "commit", "--quiet", "--no-verify", "--file", "-", env=identity, input=message)


async def _open_or_update(
    source: Source, task: Task, checkout: Checkout, summary: str, requester: str | None, run_uuid: str
) -> tuple[Literal["opened", "updated"], ChangeRequest]:
    existing = await source.find_open_change(checkout.project, checkout.branch)
    if existing is not None:
        body = change_body(task, summary, requester, run_uuid, previous=existing.body)
        return "updated", await source.update_change(checkout.project, existing.number, body)
    if not checkout.base_branch:
        raise ForgeError(
            f"the branch `{checkout.branch}` was pushed, but the repository has no default branch to open a PR into"
        )
    body = change_body(task, summary, requester, run_uuid)
    try:
        return "opened", await source.open_change(checkout.project, checkout.branch, checkout.base_branch, task.title, body)
    except ForgeError:
        # A create that reached the forge before its answer was lost is not an error.
        again = await source.find_open_change(checkout.project, checkout.branch)
        if again is None:
            raise
        return "opened", again


async def deliver(
    source: Source,
    task: Task,
    checkout: Checkout,
    git: Git,
    *,
    summary: str,
    requester: str | None,
    run_uuid: str,
    retry: RetryPolicy,
    redact: Callable[[str], str],
    body_notes: str = "",
) -> Delivery:
    """Commit, push and open/update the PR/MR when the workspace changed; else do nothing.

    `body_notes` go into the PR/MR description after the summary, not into the commit
    (e.g. the network requests the egress proxy refused, SPEC 7.1).
    """
    verify_git_dir(checkout)
    changes = await workspace_changes(git, checkout)
    if not changes.dirty and not changes.committed:
        log.info("%s: no changes in the workspace; nothing to deliver", task.key)
        return Delivery("none")
    summary = redact(summary)
    head = changes.head or ""
    if changes.dirty:
        author = await source.git_identity(None)
        coauthor = await source.git_identity(requester) if requester and requester != source.bot_name else None
        await commit_all(git, checkout, commit_message(task, summary, coauthor), author)
        head = (await git.run(checkout.path, "rev-parse", "HEAD")).stdout.strip()
    await push_branch(git, checkout, retry)
    log.info("%s: pushed %s to %s", task.key, head[:12], checkout.branch)
    if task.key.is_change:
        return Delivery("pushed", checkout.branch, head)
    try:
        described = f"{summary.rstrip()}\n\n{redact(body_notes)}" if body_notes else summary
        action, change = await _open_or_update(source, task, checkout, described, requester, run_uuid)
    except AgentError as error:
        message = f"the branch `{checkout.branch}` was pushed, but the pull/merge request failed: {error}"
        raise ForgeError(message) from error
    log.info("%s: %s %s", task.key, action, change.url)
    return Delivery(action, checkout.branch, head, change)


_NOTES: dict[str, dict[Language, str]] = {
    "opened": {
        "en": "Opened draft {noun} {ref} from `{branch}`: {url}",
        "ja": "`{branch}` からドラフトの{noun} {ref} を作成しました: {url}",
    },
    "updated": {
        "en": "Pushed `{commit}` to `{branch}` and updated {noun} {ref}: {url}",
        "ja": "`{branch}` に `{commit}` をプッシュし、{noun} {ref} を更新しました: {url}",
    },
    "pushed": {
        "en": "Pushed `{commit}` to `{branch}`.",
        "ja": "`{branch}` に `{commit}` をプッシュしました。",
    },
}
_NOUNS: dict[str, dict[Language, tuple[str, str]]] = {
    "github": {"en": ("pull request", "#"), "ja": ("プルリクエスト", "#")},
    "gitlab": {"en": ("merge request", "!"), "ja": ("マージリクエスト", "!")},
}


def delivery_note(delivery: Delivery, forge: str, language: Language) -> str:
    """The line the final comment ends with; empty when nothing was delivered."""
    if delivery.action == "none":
        return ""
    noun, sign = _NOUNS[forge][language]
    change = delivery.change
    return _NOTES[delivery.action][language].format(
        noun=noun,
        ref=f"{sign}{change.number}" if change else "",
        url=change.url if change else "",
        branch=delivery.branch,
        commit=(delivery.commit or "")[:12],
    )

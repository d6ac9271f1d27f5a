"""Paused work on the task's branch (SPEC 8.3): a WIP commit at pause, the clone again at resume.

A pause must let a worker on another machine continue with the same files, so the clone
cannot be what the pause keeps. At pause the host commits whatever the workspace holds
(the same `git add --all` as delivery, so the repository's ignores and ours apply) as a
WIP commit and pushes it to the task's branch: the same non-forced push as delivery,
the credential only in that git process's environment. The saved state keeps the
branch and the commit id, nothing that names a path of this machine.

At resume, a clone of the run on this machine that is at that commit is used as it is;
otherwise (another machine, a deleted clone, or a stale one another machine moved past)
the branch is cloned afresh and the commit checked out.

The WIP commit stays a normal commit of the branch. Delivery adds its own commit on
top and never force-pushes: a PR/MR task's branch belongs to people, and a pushed commit
may have been fetched by anyone; a squash merge folds it away if the team wants one
commit. A pause opens no PR/MR: the draft PR/MR is opened by delivery at done (SPEC 7).
Files the ignores leave out (installed dependencies, build output) are not carried
over: the setup runs again before the resumed run's first request (SPEC 7.1).
"""

from __future__ import annotations

import logging
from dataclasses import replace
from pathlib import Path

from coding_agent.domain.runs import PausedWork
from coding_agent.domain.tasks import Task
from coding_agent.errors import AgentError
from coding_agent.retry import RetryPolicy, retry_async
from coding_agent.sources.base import Source
from coding_agent.workspace.checkout import (
    Checkout,
    clone_into,
    discard_clone,
    read_record,
    remote_refs,
    reopen_workspace,
    verify_git_dir,
)
from coding_agent.workspace.delivery import commit_all, push_branch, workspace_changes
from coding_agent.workspace.git import Git

__all__ = ["PausedWork", "save_paused_work", "restore_paused_work", "wip_message"]

log = logging.getLogger(__name__)


def wip_message(task: Task, run_uuid: str, steps: int) -> str:
    """The WIP commit's message: what it is, and that the run goes on from it."""
    return (
        f"WIP: {task.title} (paused)\n\n"
        f"Work in progress of coding-agent run {run_uuid}, paused after {steps} step(s).\n"
        "The run continues from this commit when it is resumed.\n"
    )


async def _head(git: Git, path: Path) -> str | None:
    head = await git.run(path, "rev-parse", "--verify", "--quiet", "HEAD", check=False)
    return head.stdout.strip() or None


async def save_paused_work(
    source: Source, task: Task, checkout: Checkout, git: Git, *, run_uuid: str, steps: int, retry: RetryPolicy
) -> PausedWork:
    """Commit the workspace's changes (if any) and push them to the run's branch.

    A push the forge refuses is logged and the commit kept in the local clone: a resume
    on this machine still finds it; elsewhere the resume fails saying so.
    """
    verify_git_dir(checkout)
    changes = await workspace_changes(git, checkout)
    head = changes.head
    if changes.dirty:
        author = await source.git_identity(None)
        await commit_all(git, checkout, wip_message(task, run_uuid, steps), author)
        head = await _head(git, checkout.path)
    if not changes.dirty and not changes.committed:
        return PausedWork(checkout.branch, head)
    try:
        await push_branch(git, checkout, retry)
    except AgentError as error:
        log.error("%s: the paused work was not pushed (it stays in this machine's clone): %s", task.key, error)
        return PausedWork(checkout.branch, head)
    log.info("%s: paused work %s pushed to %s", task.key, (head or "")[:12], checkout.branch)
    return PausedWork(checkout.branch, head, pushed=True)


async def _has_commit(git: Git, path: Path, commit: str) -> bool:
    found = await git.run(path, "cat-file", "-e", f"{commit}^{{commit}}", check=False)
    return found.returncode == 0


async def restore_paused_work(
    source: Source, path: Path, record: Path, git: Git, work: PausedWork, *, depth: int, retry: RetryPolicy
) -> Checkout:
    """The run's clone at `path`, at the paused commit: kept if it is there, else cloned."""
    local = reopen_workspace(source, path, record)
    if local is not None and await _head(git, path) == work.commit:
        return local
    checkout = read_record(source, path, record)
    if checkout is None:
        raise AgentError(f"the paused run's checkout record ({record.name}) is missing; its work cannot be restored")
    discard_clone(path)  # a stale clone (another machine moved the run on) or a partial one
    url, auth = checkout.clone_url, checkout.auth
    remote = await retry_async(
        lambda: remote_refs(git, url, auth, [f"refs/heads/{work.branch}"]), retry, "git ls-remote"
    )
    ref = work.branch if work.branch in remote.branches else checkout.base_branch or None
    await clone_into(git, path, url, auth, ref, depth=depth, retry=retry)
    if work.commit is None:
        await git.run(path, "checkout", "--quiet", "-B", work.branch)
        return replace(checkout, branch=work.branch)
    if not await _has_commit(git, path, work.commit):  # the branch moved on meanwhile: fetch the commit
        fetch = ["fetch", "--quiet", "--no-tags", *(["--depth", str(depth)] if depth > 0 else []), url, work.commit]
        await git.run(path, *fetch, auth=auth, check=False)
    if not await _has_commit(git, path, work.commit):
        raise AgentError(
            f"the paused work (commit {work.commit[:12]} on `{work.branch}`) is not on the forge "
            "(its push at the pause failed?); the run cannot continue from it"
        )
    await git.run(path, "checkout", "--quiet", "-B", work.branch, work.commit)
    log.info("%s: cloned the paused work %s of %s afresh", checkout.project, work.commit[:12], work.branch)
    return replace(checkout, branch=work.branch)

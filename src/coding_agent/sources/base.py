"""The one interface every forge adapter implements.

The loop, the scheduler and steering talk to GitHub and GitLab only through `Source`.
Every method is async; an adapter over a blocking library (python-gitlab) runs its calls
in a worker thread. Transient failures are retried inside the adapter with the shared
`RetryPolicy`; what escapes is a `ForgeError` (or `TransientError` when retries ran out).
"""

from __future__ import annotations

from collections.abc import AsyncGenerator
from contextlib import AbstractAsyncContextManager
from datetime import datetime
from typing import Protocol, runtime_checkable

from coding_agent.config import LabelConfig
from coding_agent.domain.ci import Check, CiReport
from coding_agent.domain.delivery import ChangeRequest, GitIdentity
from coding_agent.domain.tasks import Comment, Forge, Permission, Task, TaskKey, Thread

__all__ = ["Source"]


@runtime_checkable
class Source(Protocol):
    """A task source: one forge within one configured scope."""

    forge: Forge
    labels: LabelConfig
    bot_name: str | None

    async def discover(self) -> list[Task]:
        """Open issues and PRs/MRs carrying `bot_label` in the configured scope.

        Costs O(1) requests per scope (a search / group-level listing), whatever the
        number of repositories.
        """
        ...

    def discover_followups(self, since: datetime) -> AsyncGenerator[list[Task], None]:
        """Open items carrying `done_label` updated since `since` that may hold a new @mention
        of the bot (SPEC 3 follow-ups): candidates, checked comment by comment at claim.

        Page by page, as the forge lists them: the next page is asked for once the caller
        has dealt with this one, so a poll holds one page of candidates, not every item
        updated in `comment_handling.followup_days` (thousands, for a busy bot).
        Costs O(1) requests per scope, like `discover`; no page when `bot_name` is unknown.
        """
        ...

    def discover_review_followups(self, since: datetime) -> AsyncGenerator[list[Task], None]:
        """Open PRs/MRs the bot opened (its author is `bot_name`) updated since `since`:
        candidates for a follow-up from a review thread / MR discussion (SPEC 3), checked
        thread by thread at claim.

        Page by page, as `discover_followups`; O(1) requests per scope; no page when
        `bot_name` is unknown.
        """
        ...

    async def get_task(self, key: TaskKey) -> Task:
        """A fresh snapshot of one issue or PR/MR (labels, assignees, branches)."""
        ...

    async def list_comments(self, key: TaskKey, since: datetime | None = None) -> list[Comment]:
        """Top-level comments in chronological order (system notes excluded).

        With `since` (the forge's time), only those created or edited at or after it, as
        GitHub's `since` filter answers: what a look for new comments needs, without
        reading (and parsing) the whole discussion again each time it grew.
        """
        ...

    async def list_threads(self, key: TaskKey) -> list[Thread]:
        """PR review threads / MR discussions with their comments; empty for issues."""
        ...

    async def post_comment(self, key: TaskKey, body: str) -> Comment:
        ...

    async def edit_comment(self, key: TaskKey, comment_id: str, body: str) -> None:
        ...

    async def add_label(self, key: TaskKey, label: str) -> None:
        """Add one label, creating it in the repository/project first when missing."""
        ...

    async def remove_label(self, key: TaskKey, label: str) -> None:
        """Remove one label; a label that is not there is not an error."""
        ...

    async def get_assignees(self, key: TaskKey) -> list[str]:
        """Usernames assigned now, read from the forge (not from a snapshot)."""
        ...

    async def get_permission(self, key: TaskKey, username: str) -> Permission:
        """`username`'s access to the task's repository/project."""
        ...

    async def find_trigger_user(self, key: TaskKey, label: str | None = None) -> str | None:
        """Who most recently applied `bot_label` (or assigned the bot); with `label`, who
        most recently applied that label; None if unknown."""
        ...

    # -- delivery (SPEC 7) ------------------------------------------------------------

    async def reply_in_thread(self, key: TaskKey, thread_id: str, body: str) -> Comment:
        """Answer inside a PR review thread / MR discussion (`Thread.id`)."""
        ...

    async def clone_url(self, project: str) -> str:
        """The repository's HTTPS clone URL, as the forge advertises it (no credentials in it)."""
        ...

    def git_http_auth(self) -> str | None:
        """The `Authorization: ...` header git sends to the forge; None without a token.

        Handed to git per command by the host, never written into a URL or a config file.
        """
        ...

    async def git_identity(self, username: str | None) -> GitIdentity:
        """`username` as a commit names them; None means the token's own user (the bot)."""
        ...

    async def find_open_change(self, project: str, head_branch: str) -> ChangeRequest | None:
        """The open PR/MR whose head is `head_branch` of `project` itself, if any."""
        ...

    async def open_change(self, project: str, head_branch: str, base_branch: str, title: str, body: str) -> ChangeRequest:
        """Open a draft PR/MR from `head_branch` (already pushed) into `base_branch`."""
        ...

    async def update_change(self, project: str, number: int, body: str) -> ChangeRequest:
        """Replace the description of PR/MR `number`."""
        ...

    async def read_default_branch_file(self, project: str, path: str) -> bytes | None:
        """`path` on the default branch (SPEC 7.1: the setup script; never a PR/MR head)."""
        ...

    async def repository_id(self, project: str) -> str:
        """The repository as no other on any forge is named: the forge's address and the
        repository's own id (a repository deleted and made again under the name is another)."""
        ...

    # -- CI feedback (SPEC 16) ------------------------------------------------------

    async def ci_report(self, project: str, sha: str) -> CiReport:
        """Every check of commit `sha` of `project`: GitHub check runs and commit statuses
        (two requests, conditional: an unchanged answer is a 304), GitLab the jobs of the
        sha's newest pipeline per source (two requests). O(1) whatever the number of checks
        up to 100; an unknown sha is an empty report, not an error.
        """
        ...

    async def ci_log_tail(self, project: str, check: Check, lines: int) -> str | None:
        """The last `lines` lines of `check`'s log, decoded (invalid UTF-8 replaced), or
        None when the forge has none for it (404, expired, a status without a log).

        Reads only the tail where the forge allows a range (never a whole 50 MB log into
        memory): GitHub Actions job logs, GitLab job traces. Another app's GitHub check
        run gives its output (title, summary, text) and annotations instead.
        """
        ...

    async def ci_rerun(self, project: str, check: Check) -> bool:
        """Ask the forge to run a failed check again (GitHub: re-run the failed jobs of its
        workflow run; GitLab: retry the job); False when it cannot be re-run (`rerun_id`
        None, or the forge refuses)."""
        ...

    async def mark_change_ready(self, project: str, number: int) -> None:
        """Mark draft PR/MR `number` ready for review (SPEC 16 `ci.ready_when_green`)."""
        ...

    def session(self) -> AbstractAsyncContextManager[object]:
        """One HTTP client for every request made in the calling task, and in the tasks it
        starts, until the block is left; never entered twice in one task. A worker holds one
        for each task it claims and runs: a run makes a request or two a step, and a client
        built for each one cost as much as the rest of its host-side work. A request made
        after the block is left by a task started in it fails (a `ForgeError`)."""
        ...

    async def aclose(self) -> None:
        ...

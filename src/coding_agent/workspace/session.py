"""One run's workspace from the runner's point of view: clone it, read its rules, deliver it.

The runtime owns `RunWorkspaces` (where the clones live) and hands it to the runner as
the `Workspaces` port (`domain/ports.py`); the runner opens each run's `RunWorkspace`
through it and makes three calls (`prepare`, `rules`, `deliver`), and steering a fourth
at a pause (`pause`: the WIP commit, `wip.py`). Everything about git, branches,
credentials and PRs/MRs stays in this package.
"""

from __future__ import annotations

import logging
from pathlib import Path

from coding_agent.config import WorkspaceConfig
from coding_agent.domain.delivery import PushedHead
from coding_agent.domain.tasks import Task
from coding_agent.errors import AgentError
from coding_agent.prompts.notices import Language
from coding_agent.redaction import Redactor
from coding_agent.retry import RetryPolicy
from coding_agent.sources.base import Source
from coding_agent.workspace.checkout import Checkout, discard_clone, prepare_workspace, reopen_workspace
from coding_agent.workspace.delivery import Delivery, deliver, delivery_note
from coding_agent.workspace.git import Git
from coding_agent.workspace.mirror import Mirrors, mirrors_dir
from coding_agent.workspace.rules import read_repository_rules
from coding_agent.workspace.wip import PausedWork, restore_paused_work, save_paused_work

__all__ = ["RunWorkspace", "RunWorkspaces", "PausedWork"]

log = logging.getLogger(__name__)


class RunWorkspace:
    """The clone of `task`'s repository at `path`, and its delivery at done.

    `record` is a file outside the workspace (in the run's context directory) that lets
    a continued run find its clone again. `paused`: the work a pause pushed, which a
    resumed run starts from (on this machine or any other). `fresh_since`: the clone
    holds every push made before this `time.monotonic()` (when the run was picked up).
    """

    def __init__(
        self,
        source: Source,
        task: Task,
        path: Path,
        settings: WorkspaceConfig,
        retry: RetryPolicy,
        redactor: Redactor,
        record: Path,
        paused: PausedWork | None = None,
        mirrors: Mirrors | None = None,
        fresh_since: float | None = None,
    ) -> None:
        self._source = source
        self._mirrors = mirrors
        self._fresh_since = fresh_since
        self._record = record
        self._paused = paused
        self._task = task
        self._path = path
        self._settings = settings
        self._retry = retry
        self._redactor = redactor
        self._git = Git(timeout=settings.git_timeout_seconds, redact=redactor.text)
        self._checkout: Checkout | None = None
        self.delivery: Delivery | None = None

    @property
    def checkout(self) -> Checkout:
        if self._checkout is None:
            raise RuntimeError("the workspace is not cloned yet: call prepare() first")
        return self._checkout

    async def prepare(self) -> Checkout:
        """Clone the repository and check out the run's branch (a continued run keeps its clone;
        a paused one is cloned again from its branch if its clone is not here)."""
        if self._paused is not None:
            self._checkout = await restore_paused_work(
                self._source,
                self._path,
                self._record,
                self._git,
                self._paused,
                depth=self._settings.clone_depth,
                retry=self._retry,
            )
            return self._checkout
        self._checkout = reopen_workspace(self._source, self._path, self._record) or await prepare_workspace(
            self._source,
            self._task,
            self._path,
            self._git,
            depth=self._settings.clone_depth,
            retry=self._retry,
            record=self._record,
            mirrors=self._mirrors,
            fresh_since=self._fresh_since,
        )
        return self._checkout

    async def pause(self, run_uuid: str, steps: int) -> PausedWork | None:
        """At a pause: the WIP commit, pushed to the run's branch; None when there is no
        clone yet or its git directory cannot be trusted (logged; the pause goes on)."""
        if self._checkout is None:
            return None
        try:
            return await save_paused_work(
                self._source, self._task, self._checkout, self._git, run_uuid=run_uuid, steps=steps, retry=self._retry
            )
        except (AgentError, OSError) as error:  # the pause itself must still be published
            log.error("%s: the paused work could not be committed: %s", self._task.key, self._redactor.text(str(error)))
            return None

    def rules(self) -> dict[str, str]:
        """The repository's rule files for the system prompt, each size-capped."""
        return read_repository_rules(self._path, self._settings.rules_max_bytes)

    async def deliver(
        self, summary: str, requester: str | None, run_uuid: str, language: Language, body_notes: str = ""
    ) -> str:
        """Deliver the workspace; return the final comment: `summary` plus where the change went."""
        self.delivery = await deliver(
            self._source,
            self._task,
            self.checkout,
            self._git,
            summary=summary,
            requester=requester,
            run_uuid=run_uuid,
            retry=self._retry,
            redact=self._redactor.text,
            body_notes=body_notes,
        )
        note = delivery_note(self.delivery, self._task.key.forge, language)
        summary = summary.strip()
        return f"{summary}\n\n{note}" if summary and note else summary or note

    def change_url(self) -> str | None:
        change = self.delivery.change if self.delivery is not None else None
        return change.url if change is not None else None

    def pushed_head(self) -> PushedHead | None:
        delivery = self.delivery
        if delivery is None or delivery.action == "none" or not delivery.commit or not delivery.branch:
            return None
        if delivery.change is not None:
            return PushedHead(self.checkout.project, delivery.change.number, delivery.branch, delivery.commit)
        if self._task.key.is_change:  # the task is the PR/MR: its own branch was pushed
            return PushedHead(self._task.key.project, self._task.key.number, delivery.branch, delivery.commit)
        return None


class RunWorkspaces:
    """The workspaces of every run under `settings.base_dir`: one directory per run,
    opened as a `RunWorkspace` (the `Workspaces` port of `domain/ports.py`)."""

    def __init__(self, settings: WorkspaceConfig, retry: RetryPolicy, redactor: Redactor) -> None:
        self._settings = settings
        self._retry = retry
        self._redactor = redactor
        # One per process: the runs that start together share one refresh of each mirror.
        base = Path(settings.base_dir).resolve()
        self._mirrors = Mirrors(mirrors_dir(base), settings.clone_depth) if settings.mirror else None

    def directory(self, run_uuid: str) -> Path:
        path = Path(self._settings.base_dir).resolve() / run_uuid
        path.mkdir(parents=True, exist_ok=True)
        return path

    def open(
        self,
        source: Source,
        task: Task,
        path: Path,
        record: Path,
        paused: PausedWork | None = None,
        fresh_since: float | None = None,
    ) -> RunWorkspace:
        return RunWorkspace(
            source, task, path, self._settings, self._retry, self._redactor, record, paused, self._mirrors, fresh_since
        )

    def discard(self, path: Path) -> None:
        if not self._settings.keep_finished:
            discard_clone(path)

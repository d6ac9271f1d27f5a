"""One run's workspace from the runner's point of view: clone it, read its rules, deliver it.

The runtime owns `RunWorkspaces` (where the clones live) and hands it to the runner as
the `Workspaces` port (`domain/ports.py`); the runner opens each run's `RunWorkspace`
through it and makes three calls (`prepare`, `rules`, `deliver`). Everything about git,
branches, credentials and PRs/MRs stays in this package.
"""

from __future__ import annotations

from pathlib import Path

from coding_agent.config import WorkspaceConfig
from coding_agent.domain.tasks import Task
from coding_agent.prompts.notices import Language
from coding_agent.redaction import Redactor
from coding_agent.retry import RetryPolicy
from coding_agent.sources.base import Source
from coding_agent.workspace.checkout import Checkout, discard_clone, prepare_workspace, reopen_workspace
from coding_agent.workspace.delivery import Delivery, deliver, delivery_note
from coding_agent.workspace.git import Git
from coding_agent.workspace.rules import read_repository_rules

__all__ = ["RunWorkspace", "RunWorkspaces"]


class RunWorkspace:
    """The clone of `task`'s repository at `path`, and its delivery at done.

    `record` is a file outside the workspace (in the run's context directory) that lets
    a continued run find its clone again.
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
    ) -> None:
        self._source = source
        self._record = record
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
        """Clone the repository and check out the run's branch (a continued run keeps its clone)."""
        self._checkout = reopen_workspace(self._source, self._path, self._record) or await prepare_workspace(
            self._source,
            self._task,
            self._path,
            self._git,
            depth=self._settings.clone_depth,
            retry=self._retry,
            record=self._record,
        )
        return self._checkout

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


class RunWorkspaces:
    """The workspaces of every run under `settings.base_dir`: one directory per run,
    opened as a `RunWorkspace` (the `Workspaces` port of `domain/ports.py`)."""

    def __init__(self, settings: WorkspaceConfig, retry: RetryPolicy, redactor: Redactor) -> None:
        self._settings = settings
        self._retry = retry
        self._redactor = redactor

    def directory(self, run_uuid: str) -> Path:
        path = Path(self._settings.base_dir).resolve() / run_uuid
        path.mkdir(parents=True, exist_ok=True)
        return path

    def open(self, source: Source, task: Task, path: Path, record: Path) -> RunWorkspace:
        return RunWorkspace(source, task, path, self._settings, self._retry, self._redactor, record)

    def discard(self, path: Path) -> None:
        if not self._settings.keep_finished:
            discard_clone(path)

"""CI of commits in the GitHub testing server: Actions workflow runs and their jobs (check
runs of the `github-actions` app, each with its log), other apps' check runs, commit
statuses, and what a re-run of a run's failed jobs does.

Tests set a commit's CI with `ci_job` (running, failed with a log, passed), `app_check`
and `set_status`; the HTTP layer reads it back and re-runs through `rerun_failed_jobs`.
Every change is told to the listeners registered with `on_ci` as the `CiEvent` GitHub
would send a webhook for (sandbox.py turns them into signed deliveries).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import replace
from typing import Any

from coding_agent.sandbox.github.accounts import Accounts
from coding_agent.sandbox.github.records import (
    ACTIONS_APP,
    AnnotationRecord,
    CheckRunRecord,
    CiEvent,
    StatusRecord,
    WorkflowRunRecord,
)
from coding_agent.sandbox.github.tables import NotFoundError

__all__ = ["Ci", "RerunRefused", "FAILED_CONCLUSIONS", "STATUS_STATES"]

# The conclusions GitHub counts as a failed check (and whose jobs a re-run runs again).
FAILED_CONCLUSIONS = frozenset({"failure", "timed_out", "cancelled", "action_required", "startup_failure", "stale"})
STATUS_STATES = ("error", "failure", "pending", "success")


class RerunRefused(Exception):
    """GitHub's 403 to a re-run: the run is still going, or nothing in it failed."""


class Ci(Accounts):
    """Check runs, workflow runs and commit statuses of the repositories' commits."""

    # ---------------------------------------------------------------- listeners

    def on_ci(self, listener: Callable[[CiEvent], None]) -> None:
        """Call `listener` (under the state's lock: it must not block) at each CI change."""
        with self._lock:
            self._ci_listeners.append(listener)

    def _announce(self, event: str, action: str, repo: str, subject: int) -> None:
        for listener in list(self._ci_listeners):
            listener(CiEvent(event, action, repo, subject))

    # ---------------------------------------------------------------- what tests set

    def ci_job(
        self,
        repo: str,
        sha: str,
        name: str = "test",
        *,
        conclusion: str | None = None,
        log: str | bytes | None = b"",
        rerun: str | None = None,
        workflow: str = "CI",
    ) -> CheckRunRecord:
        """Set GitHub Actions job `name` of workflow `workflow` on commit `sha`: running
        (`conclusion` None), or finished with `conclusion` ("success", "failure", ...) and
        its `log` (any bytes, any size; None: expired, a 404). `rerun`: the conclusion a re-run of it ends with
        ("success": a flaky job); None: it fails again the same way.
        """
        data = log.encode() if isinstance(log, str) else log
        with self._lock:
            full = self.repo(repo).full_name
            run = self._workflow_run_for(full, sha, workflow)
            job = self._latest(full, sha).get((ACTIONS_APP, name))
            if job is None or job.run_id != run.id:
                job = self._new_check(full, sha, name, ACTIONS_APP, run_id=run.id, run_attempt=run.run_attempt)
            return self._settle(job, conclusion, log=data, rerun=rerun)

    def app_check(
        self,
        repo: str,
        sha: str,
        name: str,
        *,
        app: str = "ci-checks",
        conclusion: str | None = None,
        title: str | None = None,
        summary: str | None = None,
        text: str | None = None,
        annotations: Iterable[AnnotationRecord] = (),
        details_url: str | None = None,
    ) -> CheckRunRecord:
        """Set another app's check run `name` on `sha` (running while `conclusion` is None),
        with the output and annotations that app reports instead of a log."""
        with self._lock:
            full = self.repo(repo).full_name
            check = self._latest(full, sha).get((app, name)) or self._new_check(full, sha, name, app)
            output = {"output_title": title, "output_summary": summary, "output_text": text}
            return self._settle(check, conclusion, annotations=tuple(annotations), details_url=details_url, **output)

    def set_status(
        self,
        repo: str,
        sha: str,
        context: str,
        state: str,
        *,
        description: str | None = None,
        target_url: str | None = None,
        creator: str | None = None,
    ) -> StatusRecord:
        """Post a commit status (`state`: error, failure, pending, success) under `context`."""
        if state not in STATUS_STATES:
            raise ValueError(f"state must be one of {', '.join(STATUS_STATES)}, got {state!r}")
        with self._lock:
            record = self.repo(repo)
            author = creator or record.owner
            self.add_user(author)
            status = StatusRecord(
                id=self._new_id(), repo=record.full_name, sha=sha, context=context, state=state,
                creator=self._require_user(author).login, created_at=self.now(),
                description=description, target_url=target_url,
            )  # fmt: skip
            self._statuses.append(status)
            self._announce("status", state, record.full_name, status.id)
            return status

    # ---------------------------------------------------------------- changes

    def _workflow_run_for(self, repo: str, sha: str, workflow: str) -> WorkflowRunRecord:
        for run in self._workflow_runs.values():
            if run.repo == repo and run.head_sha == sha and run.name == workflow:
                return run
        branch = next((name for name, tip in self.git.branches(repo).items() if tip == sha), None)
        run = WorkflowRunRecord(self._new_id(), repo, sha, branch, workflow, self.now())
        self._suite(repo, sha, ACTIONS_APP)
        self._workflow_runs[run.id] = run
        self._announce("workflow_run", "requested", repo, run.id)
        return run

    def _suite(self, repo: str, sha: str, app: str) -> int:
        """The check suite of `app` on `sha` (one per app and commit, as on GitHub)."""
        suite = (repo, sha, app)
        if suite not in self._check_suites:
            self.add_user(f"{app}[bot]", bot=True)  # who sends its webhooks
            self._check_suites[suite] = self._new_id()
        return self._check_suites[suite]

    def _new_check(self, repo: str, sha: str, name: str, app: str, **fields: Any) -> CheckRunRecord:
        self._suite(repo, sha, app)
        check = CheckRunRecord(
            id=self._new_id(), repo=repo, head_sha=sha, name=name, app=app, status="in_progress",
            conclusion=None, started_at=self.now(), **fields,
        )  # fmt: skip
        self._check_runs[check.id] = check
        self._announce("check_run", "created", repo, check.id)
        return check

    def _settle(self, check: CheckRunRecord, conclusion: str | None, **changes: Any) -> CheckRunRecord:
        """Store `check` running or finished; a finish is told for it, for its suite and its
        workflow run once nothing of theirs runs any more."""
        done = conclusion is not None
        status = "completed" if done else "in_progress"
        finished = done and (check.status != "completed" or check.conclusion != conclusion)
        completed_at = self.now() if done else None
        check = replace(check, status=status, conclusion=conclusion, completed_at=completed_at, **changes)
        self._check_runs[check.id] = check
        if finished:
            self._announce("check_run", "completed", check.repo, check.id)
            latest = self._latest(check.repo, check.head_sha).values()
            if all(other.status == "completed" for other in latest if other.app == check.app):
                suite = self._suite(check.repo, check.head_sha, check.app)
                self._announce("check_suite", "completed", check.repo, suite)
            if check.run_id is not None and self._run_state(check.run_id)[0] == "completed":
                self._announce("workflow_run", "completed", check.repo, check.run_id)
        return check

    def rerun_failed_jobs(self, repo: str, run_id: int) -> list[CheckRunRecord]:
        """Run the failed jobs of workflow run `run_id` again, as GitHub's "Re-run failed
        jobs": each a new job (new id, next attempt) ending as its `rerun` says."""
        with self._lock:
            run = self.workflow_run(repo, run_id)
            jobs = self.jobs(run)
            if any(job.status != "completed" for job in jobs):
                raise RerunRefused("This workflow is already running")
            failed = [job for job in jobs if job.conclusion in FAILED_CONCLUSIONS]
            if not failed:
                raise RerunRefused("This workflow run has no failed jobs to re-run")
            run = replace(run, run_attempt=run.run_attempt + 1)
            self._workflow_runs[run.id] = run
            self._announce("workflow_run", "requested", run.repo, run.id)
            again = []
            for job in failed:
                outcome = job.rerun or str(job.conclusion)
                log = job.log if outcome == job.conclusion else f"{job.name}: {outcome} on re-run\n".encode()
                attempt = {"run_id": run.id, "run_attempt": run.run_attempt}
                fresh = self._new_check(run.repo, run.head_sha, job.name, ACTIONS_APP, **attempt)
                again.append(self._settle(fresh, outcome, log=log, rerun=job.rerun))
            return again

    # ---------------------------------------------------------------- reads

    def _latest(self, repo: str, sha: str) -> dict[tuple[str, str], CheckRunRecord]:
        """The newest check run of each (app, name) on `sha`: what GitHub's `filter=latest` lists."""
        latest: dict[tuple[str, str], CheckRunRecord] = {}
        for check in sorted(self._check_runs.values(), key=lambda c: c.id):
            if check.repo == repo and check.head_sha == sha:
                latest[(check.app, check.name)] = check
        return latest

    def check_runs(self, repo: str, sha: str, *, latest: bool = True) -> list[CheckRunRecord]:
        """`sha`'s check runs, oldest first: only the newest of each name unless `latest` is False."""
        with self._lock:
            full = self.repo(repo).full_name
            if latest:
                return sorted(self._latest(full, sha).values(), key=lambda c: c.id)
            every = (c for c in self._check_runs.values() if c.repo == full and c.head_sha == sha)
            return sorted(every, key=lambda c: c.id)

    def check_run(self, repo: str, check_id: int) -> CheckRunRecord:
        with self._lock:
            check = self._check_runs.get(check_id)
            if check is None or check.repo.lower() != repo.lower():
                raise NotFoundError(f"check run {check_id} not found in {repo}")
            return check

    def workflow_run(self, repo: str, run_id: int) -> WorkflowRunRecord:
        with self._lock:
            run = self._workflow_runs.get(run_id)
            if run is None or run.repo.lower() != repo.lower():
                raise NotFoundError(f"workflow run {run_id} not found in {repo}")
            return run

    def jobs(self, run: WorkflowRunRecord) -> list[CheckRunRecord]:
        """The newest attempt of each job of `run`."""
        with self._lock:
            return [job for job in self._latest(run.repo, run.head_sha).values() if job.run_id == run.id]

    def _run_state(self, run_id: int) -> tuple[str, str | None]:
        jobs = self.jobs(self._workflow_runs[run_id])
        if any(job.status != "completed" for job in jobs):
            return "in_progress", None
        failed = [job.conclusion for job in jobs if job.conclusion in FAILED_CONCLUSIONS]
        return "completed", failed[0] if failed else "success"

    def workflow_run_state(self, run: WorkflowRunRecord) -> tuple[str, str | None]:
        """The run's (status, conclusion), from its newest jobs."""
        with self._lock:
            return self._run_state(run.id)

    def check_suite(self, suite_id: int) -> tuple[str, str, str]:
        """(repository, sha, app) of check suite `suite_id`."""
        with self._lock:
            for suite, number in self._check_suites.items():
                if number == suite_id:
                    return suite
            raise NotFoundError(f"check suite {suite_id} not found")

    def check_suite_id(self, repo: str, sha: str, app: str) -> int:
        with self._lock:
            return self._check_suites[(self.repo(repo).full_name, sha, app)]

    def statuses(self, repo: str, sha: str) -> list[StatusRecord]:
        """The newest status of each context on `sha`, newest first (as GitHub lists them)."""
        with self._lock:
            full = self.repo(repo).full_name
            newest: dict[str, StatusRecord] = {}
            for status in self._statuses:
                if status.repo == full and status.sha == sha:
                    newest[status.context] = status
            return sorted(newest.values(), key=lambda s: s.id, reverse=True)

    def status(self, status_id: int) -> StatusRecord:
        with self._lock:
            for status in self._statuses:
                if status.id == status_id:
                    return status
            raise NotFoundError(f"status {status_id} not found")

    def resolve_commit(self, repo: str, ref: str) -> str | None:
        """The sha `ref` (a branch or a sha) names, or None when the repository has no such commit."""
        with self._lock:
            full = self.repo(repo).full_name
            branches = self.git.branches(full)
            if ref in branches:
                return branches[ref]
            if any(c.repo == full and c.head_sha == ref for c in self._check_runs.values()):
                return ref
            if any(s.repo == full and s.sha == ref for s in self._statuses):
                return ref
            return ref if self.git.exists(full) and self.git.has_commit(full, ref) else None

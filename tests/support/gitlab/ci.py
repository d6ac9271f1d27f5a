"""CI in the GitLab testing server: pipelines of a commit, their jobs and traces, retries,
and the Pipeline Hook and Job Hook deliveries each change of them sends.

Tests say what a commit's CI does (`set_ci`: pending, running, passed, failed with a
trace of any size or encoding) and what a retry of a failed job does (`on_retry`:
"passed" makes it flaky); the API endpoints (ci_endpoints.py) read the same records,
and `POST .../jobs/:id/retry` lands here. No runner: a job is in whatever state the
test put it.
"""

from __future__ import annotations

import copy
from collections.abc import Iterable
from typing import Literal

from tests.support.gitlab.ci_json import job_hook, pipeline_hook
from tests.support.gitlab.hooks import HookDelivery, HookSender
from tests.support.gitlab.models import Job, Pipeline, Project, pipeline_status
from tests.support.gitlab.tables import GitLabTables

__all__ = ["Ci", "Outcome"]

Outcome = Literal["pending", "running", "passed", "failed"]
_STATUS: dict[str, str] = {"pending": "pending", "running": "running", "passed": "success", "failed": "failed"}
_FINISHED = frozenset({"success", "failed", "canceled", "skipped"})
_RETRYABLE = frozenset({"success", "failed", "canceled"})
_PASSED_TRACE = b"$ make test\nJob succeeded\n"


class Ci(GitLabTables):
    """Pipelines and jobs of the projects; webhook deliveries when they change."""

    def __init__(self) -> None:
        super().__init__()
        self._hooks: HookSender | None = None
        self._hook_base = "http://gitlab.sandbox"
        # GitLab's trace endpoint ignores `Range` and sends the whole trace; the testing
        # server honours it (206) unless a test turns this off to be GitLab itself.
        self.trace_ranges = True

    # -- webhooks ------------------------------------------------------------------

    def send_hooks_to(self, url: str | None, token: str | None = None, *, base_url: str | None = None) -> None:
        """Deliver Pipeline Hook and Job Hook events to `url` with `X-Gitlab-Token: token`
        from now on (None: stop); `base_url` is the instance URL the payloads link to."""
        with self.lock:
            previous, self._hooks = self._hooks, HookSender(url, token) if url else None
            self._hook_base = base_url or self._hook_base
        if previous is not None:
            previous.close()

    def hook_deliveries(self) -> list[HookDelivery]:
        """Deliveries sent so far (in order), with the receiver's answers."""
        with self.lock:
            return self._hooks.deliveries() if self._hooks is not None else []

    def close_hooks(self) -> None:
        self.send_hooks_to(None)

    # -- setting a commit's CI ---------------------------------------------------------

    def run_pipeline(
        self,
        project: str | int,
        sha: str,
        jobs: Iterable[str] = ("test",),
        *,
        ref: str | None = None,
        source: str = "push",
        allow_failure: Iterable[str] = (),
    ) -> int:
        """A new pipeline of `sha` whose jobs are pending; returns its id."""
        with self.lock:
            record = self.require_project(project)
            pipeline = self._new_pipeline(record, sha, ref, source)
            allowed = set(allow_failure)
            added = [self._add_job(record, pipeline, name, "pending", name in allowed) for name in dict.fromkeys(jobs)]
            self._announce(record, pipeline, added, None)
            return pipeline.id

    def set_ci(
        self,
        project: str | int,
        sha: str,
        outcome: Outcome,
        *,
        jobs: Iterable[str] = ("test",),
        failing: Iterable[str] | None = None,
        trace: str | bytes = b"",
        on_retry: Outcome = "failed",
        source: str = "push",
    ) -> int:
        """Put the newest `source` pipeline of `sha` (made with `jobs` when there is none) in
        `outcome`; returns its id.

        "failed": the jobs named in `failing` (default: all) fail with `trace` as their
        log, the others succeed; a retry of a failed job becomes `on_retry`.
        """
        with self.lock:
            record = self.require_project(project)
            pipeline = self._newest(record, sha, source)
            before = None
            if pipeline is None:
                pipeline = self._new_pipeline(record, sha, None, source)
            else:
                before = pipeline_status(self._jobs(record, pipeline))
            failing_names = set(failing) if failing is not None else None
            present = {job.name for job in self._jobs(record, pipeline) if not job.retried}
            for name in dict.fromkeys([*jobs, *(failing_names or ())]):
                if name not in present:
                    self._add_job(record, pipeline, name, "created", False)
            data = trace.encode() if isinstance(trace, str) else trace
            changed = []
            for job in self._jobs(record, pipeline):
                if job.retried:
                    continue
                fails = outcome == "failed" and (failing_names is None or job.name in failing_names)
                status = "failed" if fails else _STATUS["passed" if outcome == "failed" else outcome]
                job.on_retry = _STATUS[on_retry]
                if self._move(job, status, data if fails else None):
                    changed.append(job)
            self._announce(record, pipeline, changed, before)
            return pipeline.id

    def set_job(self, project: str | int, job_id: int, status: str, *, trace: str | bytes | None = None) -> None:
        """Move one job to `status` (a GitLab job status), with `trace` as its log when given."""
        with self.lock:
            record = self.require_project(project)
            job = self._job(record, job_id)
            pipeline = record.pipelines[job.pipeline_id]
            before = pipeline_status(self._jobs(record, pipeline))
            data = trace.encode() if isinstance(trace, str) else trace
            if self._move(job, status, data):
                self._announce(record, pipeline, [job], before)

    def retry_job(self, project: str | int, job_id: int) -> Job:
        """What `POST /projects/:id/jobs/:job_id/retry` does: a new job of the same name,
        in the state the retried job's `on_retry` says; ValueError when not retryable."""
        with self.lock:
            record = self.require_project(project)
            old = self._job(record, job_id)
            if old.retried or old.status not in _RETRYABLE:
                raise ValueError(f"job {job_id} is not retryable")
            pipeline = record.pipelines[old.pipeline_id]
            before = pipeline_status(self._jobs(record, pipeline))
            old.retried = True
            new = self._add_job(record, pipeline, old.name, "created", old.allow_failure, stage=old.stage)
            new.on_retry = old.on_retry
            self._move(new, old.on_retry, old.trace if old.on_retry == "failed" else None)
            self._announce(record, pipeline, [new], before)
            return copy.deepcopy(new)

    # -- readers ---------------------------------------------------------------------

    def pipelines_of(self, project: str | int, sha: str) -> list[Pipeline]:
        """The pipelines of `sha`, newest first (copies)."""
        with self.lock:
            record = self.require_project(project)
            found = [pipeline for pipeline in record.pipelines.values() if pipeline.sha == sha]
            return copy.deepcopy(sorted(found, key=lambda pipeline: pipeline.id, reverse=True))

    def jobs_of(self, project: str | int, sha: str) -> list[Job]:
        """Every job of every pipeline of `sha`, retried ones too, oldest first (copies)."""
        with self.lock:
            record = self.require_project(project)
            ids = {pipeline.id for pipeline in record.pipelines.values() if pipeline.sha == sha}
            return copy.deepcopy([job for job in record.jobs.values() if job.pipeline_id in ids])

    # -- internals (callers hold the lock) ---------------------------------------------

    def _new_pipeline(self, record: Project, sha: str, ref: str | None, source: str) -> Pipeline:
        if ref is None:
            heads = [branch for branch, head in self.git.branches(record.path_with_namespace).items() if head == sha]
            ref = heads[0] if heads else record.default_branch
        now = self.clock.now()
        iid = self.next_id(f"pipeline-iid-{record.id}")
        pipeline = Pipeline(self.next_id("pipeline"), iid, record.id, sha, ref, source, now, now)
        record.pipelines[pipeline.id] = pipeline
        return pipeline

    def _add_job(
        self, record: Project, pipeline: Pipeline, name: str, status: str, allowed: bool, stage: str = "test"
    ) -> Job:
        job = Job(self.next_id("job"), record.id, pipeline.id, name, stage, "created", self.clock.now(), allowed)
        record.jobs[job.id] = job
        pipeline.job_ids.append(job.id)
        self._move(job, status, None)
        return job

    def _move(self, job: Job, status: str, trace: bytes | None) -> bool:
        """Set a job's status (and log); True when anything changed."""
        new_trace = trace if trace is not None else (_PASSED_TRACE if status == "success" else job.trace)
        if job.status == status and job.trace == new_trace:
            return False
        now = self.clock.now()
        job.status, job.trace = status, new_trace
        if status == "running" or (status in _FINISHED and job.started_at is None):
            job.started_at = now
        job.finished_at = now if status in _FINISHED else None
        return True

    def _newest(self, record: Project, sha: str, source: str) -> Pipeline | None:
        found = [p for p in record.pipelines.values() if p.sha == sha and p.source == source]
        return max(found, key=lambda pipeline: pipeline.id) if found else None

    def _jobs(self, record: Project, pipeline: Pipeline) -> list[Job]:
        return [record.jobs[job_id] for job_id in pipeline.job_ids]

    def _job(self, record: Project, job_id: int) -> Job:
        job = record.jobs.get(job_id)
        if job is None:
            raise KeyError(f"no job {job_id} in project {record.path_with_namespace!r}")
        return job

    def _announce(self, record: Project, pipeline: Pipeline, jobs: list[Job], before: str | None) -> None:
        """A Job Hook per changed job, then a Pipeline Hook when the pipeline's status moved."""
        if not jobs:
            return
        pipeline.updated_at = self.clock.now()
        if self._hooks is None:
            return
        for job in jobs:
            self._hooks.send("Job Hook", job_hook(self, job, self._hook_base))
        if pipeline_status(self._jobs(record, pipeline)) != before:
            self._hooks.send("Pipeline Hook", pipeline_hook(self, pipeline, self._hook_base))

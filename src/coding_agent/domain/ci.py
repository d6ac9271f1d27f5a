"""What CI feedback (SPEC 16) talks about: the checks of one commit, as values.

No I/O here: the sources build these from the forge's answers (GitHub check runs and
commit statuses, GitLab pipelines and their jobs) and the CI watch decides from them.
A forge's many words for how a check ended are folded into three states, keeping the
forge's own word (`conclusion`) for what the model and the PR are told.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field, replace
from enum import StrEnum

__all__ = [
    "CheckState",
    "CheckKind",
    "Check",
    "CiReport",
    "WatchState",
    "CiWatch",
    "FailingCheck",
    "CiFix",
    "checks_to_json",
    "checks_from_json",
]


class CheckState(StrEnum):
    """How one check stands: still running, or finished one way or the other."""

    PENDING = "pending"  # queued, in progress, waiting for a runner (a manual job waiting for a person is no check)
    PASSED = "passed"  # success, neutral, skipped
    FAILED = "failed"  # failure, timed out, cancelled, action required, error


class CheckKind(StrEnum):
    """Where a check's log lives, so `Source.ci_log_tail` knows which call reads it."""

    GITHUB_ACTIONS_JOB = "github_actions_job"  # a check run of GitHub Actions: its job log
    GITHUB_CHECK_RUN = "github_check_run"  # another app's check run: its output and annotations
    GITHUB_STATUS = "github_status"  # a commit status: no log, only its description and URL
    GITLAB_JOB = "gitlab_job"  # a GitLab pipeline job: its trace


@dataclass(frozen=True)
class Check:
    """One check of a commit: a check run, a commit status or a pipeline job.

    `id` is the forge's id of the thing `kind` names (check run id = Actions job id,
    status context, GitLab job id); `rerun_id` is what a re-run is asked for (GitHub:
    the workflow run id of an Actions job; GitLab: the job id), None when it cannot be
    re-run by the agent.
    """

    id: str
    name: str
    kind: CheckKind
    state: CheckState
    conclusion: str
    url: str | None = None
    rerun_id: str | None = None


@dataclass(frozen=True)
class CiReport:
    """All checks of one commit (`sha`) of one repository, as read in one look."""

    project: str
    sha: str
    checks: tuple[Check, ...] = ()

    @property
    def appeared(self) -> bool:
        """Whether any CI reported anything for the commit yet."""
        return bool(self.checks)

    @property
    def state(self) -> CheckState | None:
        """None: nothing appeared; PENDING while any runs; FAILED if any failed; else PASSED."""
        if not self.checks:
            return None
        states = {check.state for check in self.checks}
        if CheckState.PENDING in states:
            return CheckState.PENDING
        return CheckState.FAILED if CheckState.FAILED in states else CheckState.PASSED

    @property
    def failed(self) -> tuple[Check, ...]:
        return tuple(check for check in self.checks if check.state is CheckState.FAILED)


def checks_to_json(checks: tuple[Check, ...]) -> str:
    """Checks as the store keeps them (a watch's failing checks, for its fix run)."""
    return json.dumps([asdict(check) for check in checks])


def checks_from_json(text: str | None) -> tuple[Check, ...]:
    """The checks `checks_to_json` wrote; () for nothing or for what it did not write."""
    try:
        rows = json.loads(text or "[]")
        return tuple(
            replace(Check(**row), kind=CheckKind(row["kind"]), state=CheckState(row["state"])) for row in rows
        )
    except (ValueError, TypeError, KeyError):
        return ()


class WatchState(StrEnum):
    """Where a CI watch (SPEC 16) stands. The first four are live; the rest are ends."""

    WATCHING = "watching"  # waiting for the pushed head's checks to appear and finish
    RERUN = "rerun"  # failed checks asked to run again; waiting to see them run
    FIX = "fix"  # a fix run is decided, waiting for a worker to claim it
    FIXING = "fixing"  # the fix run is working (its push starts the next watch)
    PASSED = "passed"
    FLAKY = "flaky"  # passed once the failed checks ran again
    FAILED = "failed"  # still failing when no fix attempt was left, or a fix changed nothing
    NO_CI = "no_ci"  # nothing appeared within ci.appear_seconds
    TIMED_OUT = "timed_out"  # still pending after ci.watch_seconds
    ENDED = "ended"  # a human push, a stop, a closed or merged PR/MR, a fix run that failed

    @property
    def live(self) -> bool:
        return self in (WatchState.WATCHING, WatchState.RERUN, WatchState.FIX, WatchState.FIXING)


@dataclass(frozen=True)
class CiWatch:
    """The watch of one task's PR/MR head, as the store keeps it.

    `sha` is what the agent pushed; `attempts` the fix runs already used for the task, of
    `max_attempts` (`ci.max_fix_attempts` when the watch began); `acted_at` when its state
    last changed (a re-run's request, a fix's claim); `failing` the checks that failed at
    the last look that found failures.
    """

    task_key: str
    project: str
    number: int
    head_branch: str
    sha: str
    state: WatchState
    started_at: float
    acted_at: float
    appeared_at: float | None = None
    attempts: int = 0
    max_attempts: int = 0
    reran: bool = False
    requester: str | None = None
    reply_to: str | None = None
    bot_assigned: bool = False
    failing: tuple[Check, ...] = field(default=())

    @property
    def shown(self) -> str:
        """The task's CI state as `status` and the dashboard show it."""
        tried = f"{self.attempts}/{self.max_attempts} fix attempts"
        if self.state in (WatchState.WATCHING, WatchState.RERUN):
            return f"waiting ({tried})" if self.attempts else "waiting"
        if self.state in (WatchState.FIX, WatchState.FIXING):
            return f"fixing ({tried})"
        if self.state is WatchState.FAILED:
            return f"failed ({tried})"
        return {WatchState.FLAKY: "passed (flaky)", WatchState.NO_CI: "no CI", WatchState.TIMED_OUT: "timed out"}.get(
            self.state, self.state.value
        )


@dataclass(frozen=True)
class FailingCheck:
    """A failing check as the fix run is shown it: the tail of its log, None when the
    forge has none (its name, conclusion and URL still go to the model)."""

    check: Check
    log_tail: str | None


@dataclass(frozen=True)
class CiFix:
    """What a CI fix run (SPEC 16) starts from: the checks failing on `sha` of `branch`,
    and which of the task's `max_attempts` fix runs it is."""

    sha: str
    branch: str
    attempt: int
    max_attempts: int
    failing: tuple[FailingCheck, ...]

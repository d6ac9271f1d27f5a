"""What CI feedback (SPEC 16) talks about: the checks of one commit, as values.

No I/O here: the sources build these from the forge's answers (GitHub check runs and
commit statuses, GitLab pipelines and their jobs) and the CI watch decides from them.
A forge's many words for how a check ended are folded into three states, keeping the
forge's own word (`conclusion`) for what the model and the PR are told.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

__all__ = ["CheckState", "CheckKind", "Check", "CiReport"]


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

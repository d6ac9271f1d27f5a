"""The sections of what a run does: workspace, context storage and comments, memory,
budget, egress, security, setup, stopping, pausing, progress, the loop guard, planning,
CI feedback.
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field, field_validator, model_validator

from coding_agent.config.base import _Strict
from coding_agent.domain.egress_policy import EgressPolicyError, parse_entry

__all__ = [
    "WorkspaceConfig",
    "ContextStorageConfig",
    "DEFAULT_COMPLETION_KEYWORDS",
    "CommentHandlingConfig",
    "MemoryConfig",
    "BudgetConfig",
    "RequesterBudgetConfig",
    "RepositoryBudgetConfig",
    "EgressConfig",
    "SecurityConfig",
    "SetupOverride",
    "SetupConfig",
    "TaskStopConfig",
    "CommentDetectionConfig",
    "PauseResumeConfig",
    "ProgressCommentConfig",
    "LoopGuardConfig",
    "PlanningReflectionConfig",
    "PlanningRevisionConfig",
    "PlanningVerificationConfig",
    "PlanningConfig",
    "CiConfig",
]


class WorkspaceConfig(_Strict):
    """The run's clone of the repository and how its result is delivered (SPEC 7)."""

    base_dir: str = "workspaces"
    # `git clone --depth`: 1 (shallow) is enough to commit and push; 0 clones the full history.
    clone_depth: int = Field(default=1, ge=0)
    # Each of AGENTS.md, CLAUDE.md, .github/copilot-instructions.md enters the system
    # prompt cut to this many bytes; 0 leaves them out.
    rules_max_bytes: int = Field(default=16384, ge=0)
    # Upper bound of one git command (clone, push ...) run by the agent itself.
    git_timeout_seconds: float = Field(default=300, gt=0)
    # A run's clone (and its git directory) is deleted when the run ends done, failed or
    # stopped; a paused run's is kept. True keeps finished runs' clones too (debugging).
    keep_finished: bool = False
    # One bare mirror per repository in `<base_dir>.mirrors/`, refreshed once for the runs
    # that start together; each run's clone is a local copy of it (no network clone per
    # run). False clones every run from the forge.
    mirror: bool = True


class ContextStorageConfig(_Strict):
    base_dir: str = "contexts"
    # Above this share of the provider's context_length (estimated tokens), older
    # messages are summarised; below it the history is append-only (prefix caching).
    compression_threshold: float = Field(default=0.7, gt=0, le=1)
    keep_recent_messages: int = Field(default=5, ge=1)
    cleanup_days: float = Field(default=30, gt=0)


# Whole words or phrases that mark a comment as "we are done here" (SPEC 9.1).
DEFAULT_COMPLETION_KEYWORDS: tuple[str, ...] = (
    "done",
    "thanks",
    "thank you",
    "lgtm",
    "looks good",
    "resolved",
    "ありがとう",
    "ありがとうございます",
    "ありがとうございました",
    "完了",
    "解決",
)


class CommentHandlingConfig(_Strict):
    """How the task's comments become the conversation (SPEC 9.1) and follow-ups (SPEC 3)."""

    max_comment_count: int = Field(default=10, ge=0)
    completion_keywords: list[str] = Field(default_factory=lambda: list(DEFAULT_COMPLETION_KEYWORDS))
    followup_days: float = Field(default=7, gt=0)


class MemoryConfig(_Strict):
    """Memories the model writes after each run (SPEC 9.2)."""

    enabled: bool = True
    channel_messages_limit: int = Field(default=50, ge=1)
    active_channel_days: float = Field(default=7, gt=0)
    thread_memory_days: float = Field(default=7, gt=0)


class RequesterBudgetConfig(_Strict):
    """What one person may spend per UTC day (SPEC 11.5): over it, their next task waits
    for the reset, and a run that crosses it pauses after its current step. Follow-ups
    and resumes count toward the requester who started the task. null: no limit."""

    tokens_per_day: int | None = Field(default=None, gt=0)
    runs_per_day: int | None = Field(default=None, gt=0)


class RepositoryBudgetConfig(_Strict):
    """What the tasks of one repository may spend per UTC day (SPEC 11.5). null: no limit."""

    tokens_per_day: int | None = Field(default=None, gt=0)


class BudgetConfig(_Strict):
    max_tokens: int | None = Field(default=None, gt=0)
    max_seconds: float | None = Field(default=None, gt=0)
    per_requester: RequesterBudgetConfig = Field(default_factory=RequesterBudgetConfig)
    per_repository: RepositoryBudgetConfig = Field(default_factory=RepositoryBudgetConfig)


class EgressConfig(_Strict):
    """What setup and `run` may reach through the host's egress proxy (SPEC 7.1).

    Entries: `host` (ports 80/443), `host:port`, `*.domain`. Empty: no network at all.
    Loopback, link-local and metadata addresses need an exact `host:port` entry.
    """

    setup_hosts: list[str] = Field(default_factory=list)
    run_hosts: list[str] = Field(default_factory=list)

    @field_validator("setup_hosts", "run_hosts")
    @classmethod
    def _entries(cls, entries: list[str]) -> list[str]:
        for entry in entries:
            try:
                parse_entry(entry)
            except EgressPolicyError as error:
                raise ValueError(f"{error} (an entry is host, host:port or *.domain)") from None
        return entries


class SecurityConfig(_Strict):
    allow_untrusted_triggers: bool = False
    # SPEC 15: `bwrap` runs the model's commands in bubblewrap and refuses to start where
    # bwrap cannot run; `none` runs them unsandboxed (warned in the log at every start).
    sandbox: Literal["bwrap", "none"] = "bwrap"
    egress: EgressConfig = Field(default_factory=EgressConfig)


class SetupOverride(_Strict):
    """Per-repository setup (`setup.repositories["owner/name"]`): unset keys inherit."""

    commands: list[str] | None = None
    timeout_seconds: float | None = Field(default=None, gt=0)
    max_disk_mb: int | None = Field(default=None, gt=0)
    from_repository: bool | None = None
    cache: bool | None = None


class SetupConfig(_Strict):
    """Environment setup before the first model request (SPEC 7.1).

    `commands` run in the workspace inside the sandbox, through the egress proxy with
    `security.egress.setup_hosts`. `from_repository: true` runs `.coding-agent/setup.sh`
    read from the default branch instead (never from a PR head). `cache`: keep what the
    setup left in the workspace, per repository and lockfile hash, under `cache_dir`.
    """

    commands: list[str] = Field(default_factory=list)
    timeout_seconds: float = Field(default=600, gt=0)
    # What the setup may write (workspace growth, and its private /tmp), in MiB: past it,
    # its whole process tree is killed and what it created is removed.
    max_disk_mb: int = Field(default=8192, gt=0)
    from_repository: bool = False
    cache: bool = True
    cache_dir: str = "setup-cache"
    # Keep this much of the setup's output (its tail) for the model's first turn.
    output_tail_chars: int = Field(default=4000, ge=0)
    repositories: dict[str, SetupOverride] = Field(default_factory=dict)


class TaskStopConfig(_Strict):
    """Stop a run when the bot is unassigned (SPEC 8.2, seed 002)."""

    enabled: bool = True
    # 0 disables the check; N checks on iterations 1, 1+N, 1+2N, ...
    check_interval: int = Field(default=1, ge=0)
    # Never re-read the assignees more often than this (the first check always runs).
    min_check_interval_seconds: float = Field(default=30, ge=0)


class CommentDetectionConfig(_Strict):
    """Forward comments posted while a run works to the model (SPEC 8.1, seed 000)."""

    enabled: bool = True


class PauseResumeConfig(_Strict):
    """Pause and resume (SPEC 8.3). `signal_file` defaults to <context_storage.base_dir>/pause_signal."""

    enabled: bool = True
    signal_file: str | None = None


class ProgressCommentConfig(_Strict):
    """One progress comment per run, edited in place (SPEC 8.4)."""

    enabled: bool = True
    min_edit_interval_seconds: float = Field(default=5, ge=0)


class LoopGuardConfig(_Strict):
    """A model repeating one tool call with one result (or one reply) is corrected, then
    stopped (SPEC 4): weak and local models loop, and must never burn a budget silently."""

    enabled: bool = True
    warn_after: int = Field(default=3, ge=2)
    fail_after: int = Field(default=5, ge=2)

    @model_validator(mode="after")
    def _fail_after_warning(self) -> LoopGuardConfig:
        if self.fail_after <= self.warn_after:
            raise ValueError("loop_guard.fail_after must be greater than loop_guard.warn_after")
        return self


class PlanningReflectionConfig(_Strict):
    enabled: bool = True
    trigger_interval: int = Field(default=3, ge=0)  # reflect after every N ended actions; 0: never
    trigger_on_error: bool = True


class PlanningRevisionConfig(_Strict):
    max_revisions: int = Field(default=3, ge=0)


class PlanningVerificationConfig(_Strict):
    enabled: bool = True
    max_rounds: int = Field(default=2, ge=1)


class PlanningConfig(_Strict):
    """Planning mode (SPEC 10): plan, act, reflect, revise, verify inside the section-4 loop."""

    enabled: bool = False
    max_actions: int = Field(default=20, ge=1)
    max_steps_per_action: int = Field(default=10, ge=1)
    reflection: PlanningReflectionConfig = Field(default_factory=PlanningReflectionConfig)
    revision: PlanningRevisionConfig = Field(default_factory=PlanningRevisionConfig)
    verification: PlanningVerificationConfig = Field(default_factory=PlanningVerificationConfig)


class CiConfig(_Strict):
    """CI feedback (SPEC 16): after a run pushes to its PR/MR branch, watch the head
    commit's checks; report a pass, and hand what fails to a fix run on the same branch.

    Off by default: a fix run spends the task's budget on work nobody asked for by name.
    """

    enabled: bool = False
    # No check at all within this long after the push: the repository has no CI for it.
    appear_seconds: float = Field(default=300, gt=0)
    # Still pending this long after the push: stop watching, with one note.
    watch_seconds: float = Field(default=3600, gt=0)
    # Fix runs per task; 0 only reports (a pass, or what fails).
    max_fix_attempts: int = Field(default=2, ge=0, le=20)
    # Lines of each failing check's log the fix run is shown.
    log_tail_lines: int = Field(default=200, ge=1, le=5000)
    # All CI text of one fix run's prompt (names, conclusions, URLs, log tails) in
    # characters, however many checks failed: the tails are shortened fairly to fit.
    max_prompt_chars: int = Field(default=60_000, ge=2_000, le=2_000_000)
    # Mark the draft PR/MR ready for review once all its checks pass.
    ready_when_green: bool = False
    # Re-run failed checks once before a fix run; a pass on re-run is reported as flaky.
    rerun_flaky: bool = False

    @model_validator(mode="after")
    def _watch_outlasts_appearance(self) -> CiConfig:
        if self.watch_seconds < self.appear_seconds:
            raise ValueError("ci.watch_seconds must be at least ci.appear_seconds")
        return self

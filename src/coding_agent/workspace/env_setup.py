"""Environment setup before the first model request (SPEC 7.1).

The commands come from the operator config (`setup.commands`, per-repository overrides)
or, with `setup.from_repository: true`, from `.coding-agent/setup.sh` read from the
default branch through the forge API — never from the clone, which on a PR task is the
head its author controls. They run in the workspace inside the same sandbox as `run`,
with no secret in their environment, through the egress proxy's setup allow-list, and
with a time limit at which the whole process tree is killed (bwrap's PID namespace),
and a limit on what they may write (`setup.max_disk_mb`, `disk_watch.py`), past which
it is killed the same way.

A failed or timed-out setup never fails the run: the model is told (exit code and the
tail of the output) and the run goes on. What the setup created in the workspace is
kept out of the agent's commit (`info/exclude`) and, with `setup.cache`, copied to the
setup cache so that the next run of the same repository, script and lockfiles skips it;
only a run whose workspace holds a trusted tree fills an entry (`setup_cache.py`).
"""

from __future__ import annotations

import asyncio
import logging
import time
from dataclasses import dataclass
from pathlib import Path

from coding_agent.config import AgentConfig, SetupConfig, SetupOverride
from coding_agent.errors import AgentError
from coding_agent.sources.base import Source
from coding_agent.tools.egress_sandbox import EgressSandbox
from coding_agent.tools.paths import ConfinedRoot
from coding_agent.tools.sandbox import SandboxMode, run_command
from coding_agent.workspace.disk_watch import DiskWatch
from coding_agent.workspace.git import Git
from coding_agent.workspace.setup_cache import CacheScope, SetupCache, remove_quietly

__all__ = ["REPOSITORY_SCRIPT", "SetupOutcome", "SetupPlan", "plan_setup", "run_setup"]

log = logging.getLogger(__name__)

REPOSITORY_SCRIPT = ".coding-agent/setup.sh"
_SCRIPT_MAX_BYTES = 256 * 1024


@dataclass(frozen=True)
class SetupPlan:
    """The effective setup of one repository: the script to run and how."""

    source: str  # where the script came from, for the model, the log and `doctor`
    script: str
    timeout_seconds: float
    cache: bool
    max_disk_mb: int = SetupConfig.model_fields["max_disk_mb"].default


@dataclass(frozen=True)
class SetupOutcome:
    """What the setup did, for the first turn and the progress comment."""

    source: str
    exit_code: int | None
    timed_out: bool
    output_tail: str
    cached: bool
    duration_seconds: float
    error: str = ""  # the script could not even be obtained (forge error, not UTF-8, ...)
    disk_limit_mb: int = 0  # not 0: killed for writing more than this (setup.max_disk_mb)

    @property
    def ok(self) -> bool:
        return not self.error and not self.timed_out and not self.disk_limit_mb and self.exit_code == 0

    def status(self, timeout_seconds: float) -> str:
        if self.error:
            return f"could not start: {self.error}"
        if self.disk_limit_mb:
            return (
                f"wrote more than its limit of {self.disk_limit_mb} MB (setup.max_disk_mb) and was killed with "
                "everything it started; what it created was removed"
            )
        if self.timed_out:
            return f"timed out after {timeout_seconds:g}s and was killed with everything it started"
        state = "succeeded" if self.exit_code == 0 else f"failed with exit code {self.exit_code}"
        return state + (" (restored from the setup cache, not run again)" if self.cached else "")

    def first_turn_note(self, timeout_seconds: float) -> str:
        """The paragraph the model reads before it starts: what the environment has."""
        lines = [f"## Environment setup\nThe setup ({self.source}) {self.status(timeout_seconds)}."]
        if not self.ok:
            lines.append("Dependencies may be missing; commands that need them may fail. Carry on with the task.")
        if self.output_tail.strip():
            tail = self.output_tail.replace("```", "'''")
            lines.append(f"The end of its output:\n```\n{tail.rstrip()}\n```")
        return "\n\n".join(lines)

    def progress_note(self, timeout_seconds: float) -> str | None:
        """A line for the progress comment when the setup did not succeed, else None."""
        return None if self.ok else f"Environment setup ({self.source}) {self.status(timeout_seconds)}."


def _effective(config: SetupConfig, project: str) -> SetupOverride:
    override = config.repositories.get(project) or SetupOverride()
    return SetupOverride(
        commands=override.commands if override.commands is not None else config.commands,
        timeout_seconds=override.timeout_seconds or config.timeout_seconds,
        max_disk_mb=override.max_disk_mb or config.max_disk_mb,
        from_repository=override.from_repository if override.from_repository is not None else config.from_repository,
        cache=override.cache if override.cache is not None else config.cache,
    )


async def plan_setup(config: SetupConfig, source: Source, project: str) -> SetupPlan | None:
    """The setup for `project`, or None when there is none. Raises AgentError on forge trouble."""
    settings = _effective(config, project)
    timeout = float(settings.timeout_seconds or config.timeout_seconds)
    disk_mb = int(settings.max_disk_mb or config.max_disk_mb)
    if settings.from_repository:
        data = await source.read_default_branch_file(project, REPOSITORY_SCRIPT)
        if data is None:
            return None
        if len(data) > _SCRIPT_MAX_BYTES or b"\0" in data:
            raise AgentError(f"{REPOSITORY_SCRIPT} is larger than {_SCRIPT_MAX_BYTES} bytes or binary")
        try:
            script = data.decode("utf-8")
        except UnicodeDecodeError:
            raise AgentError(f"{REPOSITORY_SCRIPT} is not UTF-8") from None
        return SetupPlan(f"{REPOSITORY_SCRIPT} from the default branch", script, timeout, bool(settings.cache), disk_mb)
    commands = [command for command in settings.commands or [] if command.strip()]
    if not commands:
        return None
    script = "set -e\n" + "\n".join(commands) + "\n"
    return SetupPlan("setup.commands from the agent's config", script, timeout, bool(settings.cache), disk_mb)


async def _status(git: Git, workspace: Path) -> list[str]:
    """`git status` records of everything that differs from the checked-out commit, ignored files too."""
    result = await git.run(
        workspace, "status", "--porcelain=v1", "-z", "--ignored=traditional", "--untracked-files=normal", check=False
    )
    return [record for record in result.stdout.split("\0") if record]


def _created_paths(records: list[str]) -> set[str]:
    """Untracked and ignored paths (directories collapsed) among `git status` records."""
    paths = {record[3:].rstrip("/") for record in records if record[:2] in ("??", "!!")}
    # git lists ignored files inside an untracked directory too; keep the outermost only.
    return {path for path in paths if not any(path.startswith(other + "/") for other in paths)}


async def _workspace_files(git: Git, workspace: Path) -> list[str]:
    """Every file of the work tree git would commit: tracked, and untracked but not ignored."""
    result = await git.run(workspace, "ls-files", "-z", "--cached", "--others", "--exclude-standard", check=False)
    return sorted({path for path in result.stdout.split("\0") if path})


async def _exclude(git: Git, workspace: Path, paths: list[str]) -> None:
    """Keep the setup's files out of the agent's commit (the repository's .gitignore is not enough)."""
    where = await git.run(workspace, "rev-parse", "--git-path", "info/exclude", check=False)
    if where.returncode != 0 or not paths:
        return
    exclude = (workspace / where.stdout.strip()).resolve()
    exclude.parent.mkdir(parents=True, exist_ok=True)
    patterns = ["/" + path.replace("\\", "\\\\").replace("*", "\\*").replace("?", "\\?") for path in paths]
    with exclude.open("a", encoding="utf-8") as handle:
        handle.write("\n# coding-agent: created by the environment setup\n" + "\n".join(patterns) + "\n")


def _remove(workspace: Path, paths: list[str]) -> None:
    root = ConfinedRoot(workspace)
    for relative in paths:
        remove_quietly(root, relative)


async def run_setup(
    plan: SetupPlan,
    project: str,
    workspace: Path,
    config: AgentConfig,
    egress: EgressSandbox | None,
    git: Git,
    sandbox: SandboxMode = "bwrap",
    *,
    scope: CacheScope | None = None,
) -> SetupOutcome:
    """Run (or restore from the cache) `plan` in `workspace`. Never raises for the script's failures.

    `scope`: the repository's identity and trust for the setup cache (SPEC 15); None
    means no cache for this run. An entry is filled only when the scope is trusted and
    the workspace is exactly its checked-out commit (nothing modified, nothing extra).
    """
    started = time.monotonic()
    tail_chars = config.setup.output_tail_chars
    records = await _status(git, workspace)
    cache = SetupCache(Path(config.setup.cache_dir)) if plan.cache and scope is not None else None
    key = ""
    if cache is not None and scope is not None:
        key = await asyncio.to_thread(cache.key, scope, plan.script, workspace, await _workspace_files(git, workspace))
        entry = cache.lookup(key)
        if entry is not None and await asyncio.to_thread(cache.restore, entry, workspace):
            await _exclude(git, workspace, entry.paths)
            log.info("%s: setup restored from the cache (%s)", project, key[:12])
            return SetupOutcome(plan.source, entry.exit_code, False, entry.output_tail, True, time.monotonic() - started)
    before = _created_paths(records)
    limit = plan.max_disk_mb * 1024 * 1024
    async with DiskWatch(workspace, limit) as watch:
        result = await run_command(
            plan.script, workspace, plan.timeout_seconds, sandbox, max_output_bytes=max(tail_chars * 2, 4096),
            egress=egress, stop=watch.stop, tmp_size_bytes=limit,
        )  # fmt: skip
    created = sorted(_created_paths(await _status(git, workspace)) - before)
    over_disk = plan.max_disk_mb if result.stopped and watch.exceeded else 0
    if result.exit_code != 0 or result.timed_out or over_disk:
        # A failed setup may have filled the disk or left half an install: give the model
        # the workspace as it was cloned (the repository's files are never touched here).
        await asyncio.to_thread(_remove, workspace, created)
        created = []
    await _exclude(git, workspace, created)
    tail = result.output[-tail_chars:] if tail_chars else ""
    ending = " (timed out)" if result.timed_out else f" (wrote more than {over_disk} MB)" if over_disk else ""
    log.info(
        "%s: setup from %s ended: exit %s%s in %.1fs", project, plan.source, result.exit_code, ending,
        result.duration_seconds,
    )  # fmt: skip
    trusted_tree = scope is not None and scope.trusted and not records
    if cache is not None and trusted_tree and result.exit_code == 0 and not result.timed_out:
        await asyncio.to_thread(cache.store, key, workspace, created, result.exit_code, tail)
    elapsed = time.monotonic() - started
    return SetupOutcome(plan.source, result.exit_code, result.timed_out, tail, False, elapsed, disk_limit_mb=over_disk)

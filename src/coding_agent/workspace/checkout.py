"""The run's workspace: a clone of the task's repository on the branch the run commits to.

Issues get `coding-agent/<number>-<slug>`. A follow-up run on the same issue finds the
branch an earlier run pushed (by its `coding-agent/<number>-` prefix, so a retitled
issue still finds it) and continues on it, so its commits land in the same PR. PR/MR
tasks work on their head branch. The clone is shallow by default
(`workspace.clone_depth`).

The clone's git directory is not in the workspace: it lives beside it
(`tools.host_git.git_dir_for`), out of the sandbox's view, because the model can write
anything in the workspace and a planted `commondir`, `url.*.insteadOf`, `http.proxy`
or filter would otherwise redirect or run inside the host's own git. The `.git` file
`git clone --separate-git-dir` leaves in the work tree is removed: the host names the
git directory on every command, and the model sees a plain tree of files.

What delivery needs to know about the clone is also written to a record out of the
model's reach (the run's context directory, `checkout.json`), so that a run resumed
after a pause or a crash continues in its clone instead of cloning again.
"""

from __future__ import annotations

import json
import logging
import re
import shutil
import unicodedata
from dataclasses import dataclass
from pathlib import Path

from coding_agent.domain.tasks import Task
from coding_agent.errors import AgentError
from coding_agent.retry import RetryPolicy, retry_async
from coding_agent.sources.base import Source
from coding_agent.tools.host_git import git_dir_for, install_attributes
from coding_agent.workspace.git import Git, GitAuth, GitError
from coding_agent.workspace.mirror import MirrorRefs, Mirrors, branch_commits, parse_ls_remote

__all__ = [
    "Checkout",
    "BRANCH_PREFIX",
    "branch_name",
    "borrow_from_mirror",
    "clone_into",
    "discard_clone",
    "prepare_workspace",
    "read_record",
    "remote_refs",
    "reopen_workspace",
    "verify_git_dir",
]

log = logging.getLogger(__name__)

BRANCH_PREFIX = "coding-agent/"
_SLUG_MAX = 40
# Build and test droppings the host leaves out of its commit (a repository's own
# .gitignore still applies; this only adds to it, in .git/info/exclude).
DEFAULT_EXCLUDES = (
    "__pycache__/",
    "*.py[cod]",
    ".pytest_cache/",
    ".mypy_cache/",
    ".ruff_cache/",
    "node_modules/",
    ".DS_Store",
    # A `.git` the model makes in the work tree (any letter case) is never committed.
    "[.][Gg][Ii][Tt]",
)


def branch_name(number: int, title: str) -> str:
    """`coding-agent/12-fix-the-login-page`: ASCII words of the title, at most 40 characters."""
    ascii_title = unicodedata.normalize("NFKD", title).encode("ascii", "ignore").decode()
    slug = re.sub(r"[^a-z0-9]+", "-", ascii_title.lower()).strip("-")
    if len(slug) > _SLUG_MAX:
        slug = slug[:_SLUG_MAX].rsplit("-", 1)[0] or slug[:_SLUG_MAX]
    return f"{BRANCH_PREFIX}{number}-{slug or 'task'}"


@dataclass(frozen=True)
class Checkout:
    """What delivery needs to know about the clone."""

    path: Path
    project: str
    clone_url: str
    auth: GitAuth | None
    branch: str
    base_branch: str
    start_sha: str
    branch_exists: bool

    @property
    def git_dir(self) -> Path:
        return git_dir_for(self.path)


@dataclass(frozen=True)
class _Remote:
    default_branch: str | None
    branches: dict[str, str]


async def remote_refs(git: Git, url: str, auth: GitAuth | None, patterns: list[str]) -> _Remote:
    result = await git.run(None, "ls-remote", "--symref", url, "HEAD", *patterns, auth=auth)
    return _Remote(*parse_ls_remote(result.stdout))


async def _target(
    git: Git, task: Task, project: str, url: str, auth: GitAuth | None, retry: RetryPolicy
) -> tuple[str, str, bool]:
    """(the branch to work on, the branch a new PR/MR goes into, whether the forge has the branch).

    One `ls-remote` answers both: the default branch (HEAD) and the branches that matter.
    """
    pattern = _branch_pattern(task)
    remote = await retry_async(lambda: remote_refs(git, url, auth, [pattern]), retry, "git ls-remote")
    return _choose(task, project, remote)


def _branch_pattern(task: Task) -> str:
    """The refs that may be the run's branch: a PR/MR's head branch, an issue's task branches."""
    key = task.key
    if key.is_change and not task.head_branch:
        raise AgentError(f"{key} has no head branch to work on")
    return f"refs/heads/{task.head_branch}" if key.is_change else f"refs/heads/{BRANCH_PREFIX}{key.number}-*"


def _choose(task: Task, project: str, remote: _Remote) -> tuple[str, str, bool]:
    """`_target`'s answer from the forge's refs (an `ls-remote`, or a fresh mirror's)."""
    key = task.key
    if key.is_change:
        if not task.head_branch:
            raise AgentError(f"{key} has no head branch to work on")
        if task.head_branch not in remote.branches:
            raise AgentError(f"the head branch {task.head_branch!r} of {key} is not in {project}")
        return task.head_branch, task.base_branch or remote.default_branch or "", True
    prefix = f"{BRANCH_PREFIX}{key.number}-"
    earlier = sorted(name for name in remote.branches if name.startswith(prefix))
    wanted = branch_name(key.number, task.title)
    branch = wanted if wanted in remote.branches else (earlier[0] if earlier else wanted)
    return branch, remote.default_branch or "", branch in remote.branches


async def prepare_workspace(
    source: Source,
    task: Task,
    path: Path,
    git: Git,
    *,
    depth: int,
    retry: RetryPolicy,
    record: Path | None = None,
    mirrors: Mirrors | None = None,
    fresh_since: float | None = None,
) -> Checkout:
    """Clone the task's repository into `path` (empty or missing) and check out the run's branch.

    `record`: where to write what `reopen_workspace` needs to continue in this clone.
    `mirrors`: clone from this machine's mirror of the repository, refreshed for this
    run (`mirror.py`: by a refresh that began after `fresh_since`), instead of from the forge.
    """
    key = task.key
    project = task.extra.get("head_repo", key.project) if key.is_change else key.project
    url = await source.clone_url(project)
    auth = git_auth(source, url, project)

    mirror: MirrorRefs | None = None
    if mirrors is not None:
        try:
            mirror = await mirrors.refreshed(git, url, auth, retry, since=fresh_since)
        except GitError as error:  # the mirror, not the forge: this run clones from the forge
            log.warning("%s: no mirror of %s (%s); cloning from the forge", key, project, error)
    if mirror is not None:
        default = [f"refs/heads/{mirror.default_branch}"] if mirror.default_branch else []
        remote = _Remote(mirror.default_branch, await branch_commits(git, mirror, [_branch_pattern(task), *default]))
        branch, base, exists = _choose(task, project, remote)
    else:
        branch, base, exists = await _target(git, task, project, url, auth, retry)
    ref = branch if exists else base or None
    if mirror is not None:
        start_sha = await borrow_from_mirror(git, path, mirror, branch, remote.branches.get(ref) if ref else None)
    else:
        await clone_into(git, path, url, auth, ref, depth=depth, retry=retry)
        if not exists:
            await git.run(path, "checkout", "--quiet", "-b", branch)
        start_sha = (await git.run(path, "rev-parse", "--verify", "--quiet", "HEAD", check=False)).stdout.strip()
    if not base:
        log.warning("%s: %s has no default branch (an empty repository?)", key, project)
    log.info("%s: cloned %s into %s on %s%s", key, project, path, branch, "" if exists else " (new)")
    checkout = Checkout(
        path=path,
        project=project,
        clone_url=url,
        auth=auth,
        branch=branch,
        base_branch=base,
        start_sha=start_sha,
        branch_exists=exists,
    )
    if record is not None:
        record.write_text(json.dumps(_record(checkout)), encoding="utf-8")
    return checkout


async def clone_into(
    git: Git,
    path: Path,
    url: str,
    auth: GitAuth | None,
    ref: str | None,
    *,
    depth: int,
    retry: RetryPolicy,
) -> None:
    """Clone `url` (at branch `ref`, else its default) into `path`, git directory outside it.

    The `.git` file the clone leaves in the work tree is removed, the git directory gets
    the host's attributes and excludes: the clone is what every host git command expects.
    """
    clone = ["clone", "--quiet", "--no-tags"] + (["--depth", str(depth)] if depth > 0 else [])
    if ref:
        clone += ["--branch", ref]
    path.mkdir(parents=True, exist_ok=True)
    git_dir = git_dir_for(path)
    git_dir.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    clone += ["--separate-git-dir", str(git_dir)]
    await retry_async(lambda: _clone(git, clone, url, path, auth), retry, "git clone")
    _finish_git_dir(path, git_dir)


async def borrow_from_mirror(git: Git, path: Path, mirror: MirrorRefs, branch: str, commit: str | None) -> str:
    """Make `path` a clone of this machine's fresh `mirror` on `branch` at `commit` (None:
    an empty repository); its commit, the run's start.

    Two git processes and no copy: `init`, then the mirror's objects borrowed through
    `objects/info/alternates` (and its `shallow` boundary, when it has one), then one
    `checkout -b`. `clone --shared` does the same for a full mirror, but for a shallow one
    (the default `clone_depth: 1`) git ignores it and packs, sends and indexes every
    object again (five processes, about 55 ms of CPU a run here). The mirror is never
    garbage-collected, so what a run borrows stays there.
    """
    path.mkdir(parents=True, exist_ok=True)
    git_dir = git_dir_for(path)
    git_dir.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    try:
        await git.run(None, "init", "--quiet", "--template=", "--separate-git-dir", str(git_dir), str(path))
        info = git_dir / "objects" / "info"
        info.mkdir(parents=True, exist_ok=True)
        (info / "alternates").write_text(f"{mirror.path / 'objects'}\n", encoding="utf-8")
        if mirror.shallow:
            shutil.copyfile(mirror.path / "shallow", git_dir / "shallow")
        _finish_git_dir(path, git_dir)
        await git.run(path, "checkout", "--quiet", "-b", branch, *([commit] if commit else []))
    except Exception:
        for leftover in (git_dir, path):
            shutil.rmtree(leftover, ignore_errors=True)
        raise
    return commit or ""


def _finish_git_dir(path: Path, git_dir: Path) -> None:
    """What every clone of a run gets: no `.git` in the work tree (the host names the git
    directory on every command), the host's attributes and excludes."""
    (path / ".git").unlink()
    install_attributes(git_dir)
    exclude = git_dir / "info" / "exclude"
    exclude.parent.mkdir(parents=True, exist_ok=True)
    with exclude.open("a", encoding="utf-8") as handle:
        handle.write("\n# coding-agent: never committed by the agent\n" + "\n".join(DEFAULT_EXCLUDES) + "\n")


def _record(checkout: Checkout) -> dict[str, object]:
    return {
        "project": checkout.project,
        "clone_url": checkout.clone_url,
        "branch": checkout.branch,
        "base_branch": checkout.base_branch,
        "start_sha": checkout.start_sha,
        "branch_exists": checkout.branch_exists,
    }


def reopen_workspace(source: Source, path: Path, record: Path) -> Checkout | None:
    """The checkout of a clone made by an earlier part of the same run; None when there is none."""
    if not git_dir_for(path).is_dir():
        return None
    return read_record(source, path, record)


def read_record(source: Source, path: Path, record: Path) -> Checkout | None:
    """The checkout `record` describes, for a clone at `path` (which may not exist yet).

    The record holds no path of the machine that wrote it, so any machine can read it.
    """
    if not record.is_file():
        return None
    data = json.loads(record.read_text(encoding="utf-8"))
    url = str(data["clone_url"])
    return Checkout(
        path=path,
        project=str(data["project"]),
        clone_url=url,
        auth=git_auth(source, url, str(data["project"])),
        branch=str(data["branch"]),
        base_branch=str(data["base_branch"]),
        start_sha=str(data["start_sha"]),
        branch_exists=bool(data["branch_exists"]),
    )


def git_auth(source: Source, url: str, project: str) -> GitAuth | None:
    """The credential git sends to the forge for `project`. A source whose credential
    expires (a GitHub App's: `git_http_auth_for`) is asked again before every command."""
    renew = getattr(source, "git_http_auth_for", None)
    if renew is not None:
        return GitAuth(url, source.git_http_auth() or "", renew=lambda: renew(project))
    header = source.git_http_auth()
    return GitAuth(url, header) if header else None


async def _clone(git: Git, clone: list[str], url: str, path: Path, auth: GitAuth | None) -> None:
    """One clone attempt; what a failed attempt left behind is removed so the next can start."""
    try:
        await git.run(None, *clone, url, str(path), auth=auth)
    except Exception:
        for leftover in (git_dir_for(path), path):
            shutil.rmtree(leftover, ignore_errors=True)
        path.mkdir(parents=True, exist_ok=True)
        raise


def discard_clone(path: Path) -> None:
    """Delete a run's clone: the workspace and its git directory beside it (`git_dir_for`).

    Called when a run has ended (done, failed, stopped): nothing reads the clone again,
    and a busy worker would otherwise fill its disk with one repository per run.
    """
    for directory in (path, git_dir_for(path)):
        shutil.rmtree(directory, ignore_errors=True)


def verify_git_dir(checkout: Checkout) -> None:
    """Check that the git directory outside the workspace is still the clone's.

    The sandbox never sees it; this guards against a deployment that binds it in by
    mistake (a symlink or a missing directory means something else wrote there).
    """
    git_dir = checkout.git_dir
    if git_dir.is_symlink() or not git_dir.is_dir() or (git_dir / "commondir").exists():
        raise GitError(f"the git directory of {checkout.path} was changed during the run; nothing was committed")

"""A bare mirror per repository, shared by the runs of this machine (`workspace.mirror`).

Why: every run used to clone its repository from the forge and list its refs
(`ls-remote`), each a network round trip and, on the forge's side, an upload-pack; when
16 runs start together they paid it 16 times. With a mirror, the runs that start
together share one refresh (`ls-remote` for the default branch, then one `fetch` of
every branch), and each run's clone borrows the mirror's objects
(`objects/info/alternates`, `checkout.borrow_from_mirror`): no copy, no network.

A refresh reads no list of every branch: a run asks the mirror for the few branches it
needs (`branch_commits`). The agent pushes a branch per task, so a busy repository has
thousands; listing them all on every refresh, twice, made each run's work (and the
memory `serve` needs for it) grow with the number of tasks ever done
(docs/performance.md, the soak).

Freshness is what a network clone gave: a run uses a refresh that *began after the run
was picked up*, never an older one, so a push just before the run started is always seen.
Runs in other processes on the machine share the same mirrors; a file lock keeps
their refreshes apart.

The mirror lives outside every workspace (`<workspaces>.mirrors/`, beside the git
directories), is written only by the host's hardened git, and holds no credential (the
token goes per command, as for every host git call). It is never garbage-collected
(`gc.auto 0`; its packs are only rolled up) and never deleted while it is a repository:
a run's clone may borrow any object it had. Its name is a hash of the clone URL, so a
fork (a PR's head repository) gets its own.
"""

from __future__ import annotations

import asyncio
import fcntl
import hashlib
import logging
import math
import os
import shutil
import time
from dataclasses import dataclass, field
from pathlib import Path

from coding_agent.retry import RetryPolicy, retry_async
from coding_agent.workspace.git import Git, GitAuth, GitError

__all__ = ["Mirrors", "MirrorRefs", "branch_commits", "mirrors_dir", "parse_ls_remote"]

log = logging.getLogger(__name__)

_LOCK_POLL_SECONDS = 0.02


def mirrors_dir(workspaces: Path) -> Path:
    """Where the mirrors of the workspaces under `workspaces` live: beside them, never inside."""
    return Path(f"{workspaces}.mirrors")


@dataclass(frozen=True)
class MirrorRefs:
    """A refreshed mirror: its path, the forge's default branch, and whether it is shallow."""

    path: Path
    default_branch: str | None
    shallow: bool


async def branch_commits(git: Git, mirror: MirrorRefs, patterns: list[str]) -> dict[str, str]:
    """{branch: commit} of the mirror's branches that match `patterns` (`refs/heads/...`,
    globs allowed; at least one: no pattern would list every branch)."""
    if not patterns:
        raise ValueError("branch_commits needs at least one pattern")
    listing = await git.run(None, f"--git-dir={mirror.path}", "for-each-ref", "--format=%(objectname)\t%(refname)", *patterns)
    return parse_ls_remote(listing.stdout)[1]


@dataclass
class _Entry:
    loop: asyncio.AbstractEventLoop
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)
    fresh_as_of: float = -math.inf  # when the last refresh that succeeded began (time.monotonic)
    refs: MirrorRefs | None = None
    failed_as_of: float = -math.inf  # when the last refresh that failed began
    error: BaseException | None = None


class Mirrors:
    """The mirrors under `root`, one per clone URL, refreshed at most once per burst of runs."""

    def __init__(self, root: Path, depth: int, max_packs: int = 16) -> None:
        self._root = root
        self._depth = depth
        self._max_packs = max_packs
        self._entries: dict[str, _Entry] = {}

    def path_for(self, url: str) -> Path:
        return self._root / (hashlib.sha256(url.encode()).hexdigest()[:24] + ".git")

    async def refreshed(
        self, git: Git, url: str, auth: GitAuth | None, retry: RetryPolicy, since: float | None = None
    ) -> MirrorRefs:
        """The mirror of `url`, fetched by a refresh that began after `since` (a
        `time.monotonic()`; default: this call). A run passes the moment it was picked
        up: it sees every push made before then, and the runs picked up together share
        one refresh even when their claims take longer for some than for others."""
        loop = asyncio.get_running_loop()
        entry = self._entries.get(url)
        if entry is None or entry.loop is not loop:  # an asyncio.Lock serves one event loop
            entry = self._entries[url] = _Entry(loop)
        asked = time.monotonic() if since is None else since
        async with entry.lock:
            if entry.fresh_as_of > asked and entry.refs is not None:
                return entry.refs  # a refresh began after we asked and has finished: it is fresh enough
            if entry.failed_as_of > asked and entry.error is not None:
                raise entry.error  # ... and failed (after its retries): the runs waiting on it do not each retry again
            began = time.monotonic()
            try:
                refs = await retry_async(lambda: self._refresh(git, url, auth), retry, "mirror refresh")
            except Exception as error:
                entry.failed_as_of, entry.error = began, error
                raise
            entry.fresh_as_of, entry.refs = began, refs
            return refs

    async def _refresh(self, git: Git, url: str, auth: GitAuth | None) -> MirrorRefs:
        path = self.path_for(url)
        path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        descriptor = os.open(f"{path}.lock", os.O_RDWR | os.O_CREAT, 0o600)
        try:
            await _lock(descriptor)
            await asyncio.to_thread(_remove_dead_locks, path)
            listing = await git.run(None, "ls-remote", "--symref", url, "HEAD", auth=auth)
            default, any_branch = parse_ls_remote(listing.stdout)[0], _names_a_commit(listing.stdout)
            if not any_branch:  # empty, or HEAD names a branch that is not there: any other?
                any_branch = bool((await git.run(None, "ls-remote", url, "refs/heads/*", auth=auth)).stdout.strip())
            try:
                await self._fetch(git, path, url, auth, any_branch)
            except GitError:
                if await _is_repository(git, path):
                    # Sound, and running runs' clones borrow its objects: it stays. This
                    # run clones from the forge; the next refresh fetches into it again.
                    raise
                # No repository any more (a crash, a full disk): none of its clones can
                # borrow from it either. The next refresh makes it afresh.
                log.warning("the mirror %s is no git repository any more; it is made again next time", path.name)
                shutil.rmtree(path, ignore_errors=True)
                raise
            return MirrorRefs(path, default, (path / "shallow").is_file())
        finally:
            os.close(descriptor)  # releases the lock

    async def _fetch(self, git: Git, path: Path, url: str, auth: GitAuth | None, any_branch: bool) -> None:
        """Fetch every branch into the mirror.

        A run reads its branches from the mirror (`branch_commits`), never from an
        `ls-remote` before the fetch: a branch that moved in between would name a commit
        the (shallow) fetch never got. (An empty repository is never fetched: a glob
        refspec matching nothing fails. Its mirror is still made: a run's clone borrows
        from it all the same.)
        """
        if not (path / "HEAD").is_file():
            await git.run(None, "init", "--quiet", "--bare", "--template=", str(path))
            await git.run(None, f"--git-dir={path}", "config", "gc.auto", "0")
        if not any_branch:
            return
        # Every fetch keeps what it got as one pack (never loose objects), so that the
        # packs can be counted and rolled up below.
        fetch = ["-c", "fetch.unpackLimit=1", f"--git-dir={path}", "fetch", "--quiet", "--prune", "--no-tags"]
        fetch += ["--no-write-fetch-head", *(["--depth", str(self._depth)] if self._depth > 0 else [])]
        await git.run(None, *fetch, url, "+refs/heads/*:refs/heads/*", auth=auth)
        await self._roll_up_packs(git, path)

    async def _roll_up_packs(self, git: Git, path: Path) -> None:
        """Roll the small packs the refreshes left into bigger ones once there are more
        than `max_packs`: without it a busy mirror gained a pack per refresh for ever, and
        every object lookup, its clones' too, looks through them all. `--geometric` rolls
        up whole packs, every object they hold, reachable or not (a force-pushed-away
        commit a running clone borrows stays), and leaves the big base pack alone; readers
        that lose a pack mid-lookup find the new one (git looks again)."""
        if len(list((path / "objects" / "pack").glob("*.pack"))) > self._max_packs:
            await git.run(None, f"--git-dir={path}", "repack", "-d", "--quiet", "--geometric=2")


def _remove_dead_locks(path: Path) -> None:
    """Remove the lock files a git process killed in the mirror left (`shallow.lock`,
    `packed-refs.lock`, `refs/heads/<branch>.lock`, ...): every later fetch failed on them.
    Only called under the mirror's file lock, which every git process writing the mirror
    runs under, so no live process holds one."""
    for left in (*path.glob("*.lock"), *(path / "refs").rglob("*.lock")):
        log.warning("the mirror %s: removing %s, left by a git process that stopped", path.name, left.name)
        left.unlink(missing_ok=True)


async def _is_repository(git: Git, path: Path) -> bool:
    try:
        await git.run(None, f"--git-dir={path}", "rev-parse", "--git-dir")
    except GitError:
        return False
    return True


async def _lock(descriptor: int) -> None:
    """Take the mirror's file lock without blocking the event loop (another process may hold it)."""
    while True:
        try:
            fcntl.flock(descriptor, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return
        except BlockingIOError:
            await asyncio.sleep(_LOCK_POLL_SECONDS)


def _names_a_commit(stdout: str) -> bool:
    """Whether `git ls-remote ... HEAD` output gives HEAD a commit (not only a symref)."""
    return any(line.endswith("\tHEAD") and not line.startswith("ref: ") for line in stdout.splitlines())


def parse_ls_remote(stdout: str) -> tuple[str | None, dict[str, str]]:
    """`git ls-remote --symref` output: (the default branch HEAD names, {branch: commit})."""
    default: str | None = None
    branches: dict[str, str] = {}
    for line in stdout.splitlines():
        left, _, ref = line.partition("\t")
        if left.startswith("ref: refs/heads/") and ref == "HEAD":
            default = left.removeprefix("ref: refs/heads/")
        elif ref.startswith("refs/heads/"):
            branches[ref.removeprefix("refs/heads/")] = left
    return default, branches

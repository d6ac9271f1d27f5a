"""The workspace package against the sandbox GitHub: real clones, commits, pushes and PRs.

`prepare_workspace` and `deliver` run the host's git over smart HTTP with the bot's
token (through `GitHubSource`), exactly as a run does; the tests then look at the forge
(its pulls, its bare repository) and at the workspace's files. The last ones clone
through a shared mirror (`workspace/mirror.py`), counting the forge's git requests.
"""

from __future__ import annotations

import asyncio
import os
import shutil
import time
from collections.abc import AsyncIterator, Iterator
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import pytest
from pydantic import SecretStr

from coding_agent.config import GitHubConfig
from coding_agent.domain.tasks import Task, TaskKey
from coding_agent.retry import RetryPolicy
from coding_agent.sandbox.git_http import git_client
from coding_agent.sandbox.github import GitHubSandbox
from coding_agent.sources.github import GitHubSource
from coding_agent.tools.host_git import git_dir_for
from coding_agent.workspace.checkout import Checkout, branch_name, prepare_workspace, reopen_workspace
from coding_agent.workspace.delivery import SUMMARY_END, SUMMARY_START, deliver
from coding_agent.workspace.git import Git, GitResult, PushRejected
from coding_agent.workspace.mirror import Mirrors, mirrors_dir
from coding_agent.workspace.rules import read_repository_rules

REPO = "acme/widgets"
BOT_TOKEN = "ghp_" + "WorkspaceBotToken0123456789abcdef"
FAST = RetryPolicy(retries=2, base_delay=0.01, max_delay=0.05)
NOW = datetime(2025, 1, 1, tzinfo=timezone.utc)


@pytest.fixture
def sandbox() -> Iterator[GitHubSandbox]:
    with GitHubSandbox() as box:
        state = box.state
        state.add_user("alice", token="t-alice", name="Alice Liddell", email="alice@example.test")
        state.add_user("agent-bot", token=BOT_TOKEN, bot=True)
        state.add_repo(REPO)
        state.set_permission(REPO, "alice", "admin")
        state.set_permission(REPO, "agent-bot", "write")
        state.init_repo(REPO, files={"README.md": "# widgets\n", "src/app.py": "x = 1\n"})
        state.git.commit_files(REPO, "main", {"src/app.py": "x = 2\n"}, "Second")
        state.git.commit_files(REPO, "main", {"src/app.py": "x = 3\n"}, "Third")
        yield box


@pytest.fixture
async def source(sandbox: GitHubSandbox) -> AsyncIterator[GitHubSource]:
    config = GitHubConfig(api_url=sandbox.url, token=SecretStr(BOT_TOKEN), owner="acme", bot_name="agent-bot")
    github = GitHubSource(config, FAST)
    yield github
    await github.aclose()


def _task(number: int, title: str, *, change: bool = False, head: str | None = None) -> Task:
    kind = "!" if change else "#"
    return Task(
        key=TaskKey.parse(f"github:{REPO}{kind}{number}"),
        title=title,
        body="",
        author="alice",
        labels=("coding agent",),
        assignees=(),
        url=f"https://example.test/{REPO}/{number}",
        created_at=NOW,
        updated_at=NOW,
        head_branch=head,
        base_branch="main" if change else None,
    )


def _git() -> Git:
    return Git(timeout=60)


async def _prepare(
    source: GitHubSource,
    task: Task,
    path: Path,
    depth: int = 1,
    mirrors: Mirrors | None = None,
    fresh_since: float | None = None,
) -> Checkout:
    record = path.with_name(path.name + ".checkout.json")
    return await prepare_workspace(
        source, task, path, _git(), depth=depth, retry=FAST, record=record, mirrors=mirrors, fresh_since=fresh_since
    )


async def _deliver(source: GitHubSource, task: Task, checkout: Checkout, summary: str = "Added hello.txt") -> object:
    return await deliver(
        source, task, checkout, _git(), summary=summary, requester="alice", run_uuid="run-1", retry=FAST, redact=str
    )


def test_branch_names_are_slugs_of_the_title() -> None:
    assert branch_name(12, "Fix the Login page!") == "coding-agent/12-fix-the-login-page"
    assert branch_name(3, "Ünïcode café") == "coding-agent/3-unicode-cafe"
    assert branch_name(4, "日本語のタイトル") == "coding-agent/4-task"
    long = branch_name(5, "word " * 30)
    assert len(long) <= len("coding-agent/5-") + 40 and not long.endswith("-")


async def test_issue_clone_is_shallow_on_its_own_branch_without_the_token(
    sandbox: GitHubSandbox, source: GitHubSource, tmp_path: Path
) -> None:
    shallow = await _prepare(source, _task(1, "Add a greeting"), tmp_path / "shallow")
    full = await _prepare(source, _task(1, "Add a greeting"), tmp_path / "full", depth=0)

    assert shallow.branch == "coding-agent/1-add-a-greeting" and not shallow.branch_exists
    assert shallow.base_branch == "main" and shallow.start_sha == sandbox.state.branches(REPO)["main"]
    assert git_client(None, f"--git-dir={shallow.git_dir}", "rev-list", "--count", "HEAD").stdout.strip() == "1"
    assert git_client(None, f"--git-dir={full.git_dir}", "rev-list", "--count", "HEAD").stdout.strip() == "3"
    assert git_client(None, f"--git-dir={shallow.git_dir}", "branch", "--show-current").stdout.strip() == shallow.branch
    assert (shallow.path / "src" / "app.py").read_text() == "x = 3\n"
    assert not (shallow.path / ".git").exists(), "the git directory is not in the workspace"
    assert shallow.git_dir == git_dir_for(shallow.path) and not shallow.git_dir.is_relative_to(shallow.path)
    config = (shallow.git_dir / "config").read_text()
    assert BOT_TOKEN not in config and "extraheader" not in config.lower() and "Authorization" not in config
    assert f"url = {sandbox.url}/{REPO}.git" in config, "the remote URL carries no credential"


async def test_a_continued_run_reopens_its_clone(source: GitHubSource, tmp_path: Path) -> None:
    checkout = await _prepare(source, _task(1, "Add a greeting"), tmp_path / "ws")
    record = tmp_path / "ws.checkout.json"
    assert reopen_workspace(source, checkout.path, record) == checkout
    assert reopen_workspace(source, tmp_path / "elsewhere", record) is None
    assert reopen_workspace(source, checkout.path, tmp_path / "no-record.json") is None


async def test_changes_become_a_draft_pull_request(sandbox: GitHubSandbox, source: GitHubSource, tmp_path: Path) -> None:
    task = _task(1, "Add a greeting")
    checkout = await _prepare(source, task, tmp_path / "ws")
    (checkout.path / "hello.txt").write_text("hello\n")
    (checkout.path / "__pycache__").mkdir()
    (checkout.path / "__pycache__" / "x.cpython-311.pyc").write_bytes(b"\0")

    delivery = await _deliver(source, task, checkout, "Added hello.txt\n\nIt greets.")

    [pull] = sandbox.state.pulls(REPO)
    assert delivery.action == "opened" and delivery.change.number == pull.number  # type: ignore[attr-defined]
    assert pull.draft and pull.head == checkout.branch and pull.base == "main"
    assert pull.body.startswith("Closes #1") and "It greets." in pull.body and "@alice" in pull.body
    git = sandbox.state.git
    assert git.read_file(REPO, checkout.branch, "hello.txt") == b"hello\n"
    assert git.read_file(REPO, checkout.branch, "__pycache__/x.cpython-311.pyc") is None, "droppings are not committed"
    message = git.log(REPO, checkout.branch)[0]
    assert message.startswith("Added hello.txt\n\nIt greets.")
    assert message.endswith("Co-authored-by: Alice Liddell <alice@example.test>")
    author = git_client(None, f"--git-dir={checkout.git_dir}", "log", "-1", "--format=%an <%ae>").stdout.strip()
    bot_id = sandbox.state.user("agent-bot").id
    assert author == f"agent-bot <{bot_id}+agent-bot@users.noreply.127.0.0.1>"


async def test_no_changes_deliver_nothing(sandbox: GitHubSandbox, source: GitHubSource, tmp_path: Path) -> None:
    task = _task(1, "Just a question")
    checkout = await _prepare(source, task, tmp_path / "ws")

    delivery = await _deliver(source, task, checkout)

    assert delivery.action == "none"  # type: ignore[attr-defined]
    assert set(sandbox.state.branches(REPO)) == {"main"} and sandbox.state.pulls(REPO) == []


async def test_follow_up_run_continues_the_branch_and_updates_the_pull(
    sandbox: GitHubSandbox, source: GitHubSource, tmp_path: Path
) -> None:
    first = await _prepare(source, _task(1, "Add a greeting"), tmp_path / "one")
    (first.path / "hello.txt").write_text("hello\n")
    await _deliver(source, _task(1, "Add a greeting"), first, "First summary")
    [pull] = sandbox.state.pulls(REPO)
    sandbox.state.update_issue(REPO, pull.number, body="Reviewer note on top\n\n" + pull.body)

    retitled = _task(1, "Add a greeting and a farewell")
    second = await _prepare(source, retitled, tmp_path / "two")
    assert second.branch == first.branch and second.branch_exists
    assert (second.path / "hello.txt").read_text() == "hello\n", "the second run starts from the first run's commit"
    (second.path / "bye.txt").write_text("bye\n")
    delivery = await _deliver(source, retitled, second, "Second summary")

    [updated] = sandbox.state.pulls(REPO)
    assert delivery.action == "updated" and updated.number == pull.number  # type: ignore[attr-defined]
    assert "Reviewer note on top" in updated.body and "Second summary" in updated.body
    assert "First summary" not in updated.body and updated.body.count(SUMMARY_START) == 1 == updated.body.count(SUMMARY_END)
    subjects = [message.splitlines()[0] for message in sandbox.state.git.log(REPO, first.branch)]
    assert subjects == ["Second summary", "First summary", "Third", "Second", "Initial commit"]


async def test_a_pull_request_task_pushes_to_its_head_branch(
    sandbox: GitHubSandbox, source: GitHubSource, tmp_path: Path
) -> None:
    number = sandbox.state.create_pull(REPO, "Feature", author="alice", head="feature")
    before = sandbox.state.branches(REPO)["feature"]
    task = _task(number, "Feature", change=True, head="feature")
    checkout = await _prepare(source, task, tmp_path / "ws")
    (checkout.path / "fix.txt").write_text("fixed\n")

    delivery = await _deliver(source, task, checkout)

    assert delivery.action == "pushed" and checkout.branch == "feature"  # type: ignore[attr-defined]
    assert sandbox.state.branches(REPO)["feature"] != before
    assert sandbox.state.git.read_file(REPO, "feature", "fix.txt") == b"fixed\n"
    assert len(sandbox.state.pulls(REPO)) == 1, "no second pull request"


async def test_planted_hooks_and_config_never_run_in_the_host_git(
    sandbox: GitHubSandbox, source: GitHubSource, tmp_path: Path
) -> None:
    """What the model can plant in the work tree: a `.git` of its own, attributes, a `.git` file."""
    task = _task(1, "Add a greeting")
    checkout = await _prepare(source, task, tmp_path / "ws")
    cloned_config = (checkout.git_dir / "config").read_bytes()
    marker = tmp_path / "hook-ran"
    planted = checkout.path / ".git"
    hooks = planted / "hooks"
    hooks.mkdir(parents=True)
    for hook in ("pre-commit", "commit-msg", "pre-push", "post-commit", "reference-transaction"):
        (hooks / hook).write_text(f"#!/bin/sh\nenv >> {marker}\n")
        (hooks / hook).chmod(0o755)
    (planted / "config").write_text(
        f'[core]\n\thooksPath = {hooks}\n\tfsmonitor = "env >> {marker}"\n'
        f'[url "http://127.0.0.1:9/"]\n\tinsteadOf = {sandbox.url}/\n'
        f'[filter "x"]\n\tclean = "touch {marker}; cat"\n'
    )
    (planted / "commondir").write_text(str(checkout.git_dir))
    (checkout.path / ".gitattributes").write_text("* filter=x diff=x\n")
    sub = checkout.path / "sub" / ".GIT"
    sub.mkdir(parents=True)
    (sub / "config").write_text("[core]\n\tbare = true\n")
    (checkout.path / "hello.txt").write_text("hello\n")

    delivery = await _deliver(source, task, checkout)

    assert delivery.action == "opened", "the planted insteadOf did not divert the push"  # type: ignore[attr-defined]
    assert not marker.exists(), "a hook, filter or fsmonitor planted in the workspace ran in the host's git"
    assert (checkout.git_dir / "config").read_bytes() == cloned_config
    git = sandbox.state.git
    assert git.read_file(REPO, checkout.branch, "hello.txt") == b"hello\n"
    assert git.read_file(REPO, checkout.branch, ".gitattributes") == b"* filter=x diff=x\n"
    assert git.read_file(REPO, checkout.branch, ".git/config") is None
    assert git.read_file(REPO, checkout.branch, "sub/.GIT/config") is None


async def test_rejected_pushes_raise_and_open_nothing(sandbox: GitHubSandbox, source: GitHubSource, tmp_path: Path) -> None:
    task = _task(1, "Add a greeting")
    raced = await _prepare(source, task, tmp_path / "raced")
    (raced.path / "hello.txt").write_text("hello\n")
    sandbox.state.create_branch(REPO, raced.branch)
    sandbox.state.git.race_next_push(REPO, raced.branch)
    with pytest.raises(PushRejected, match="non-fast-forward"):
        await _deliver(source, task, raced)

    other = _task(2, "Another")
    refused = await _prepare(source, other, tmp_path / "refused")
    (refused.path / "hello.txt").write_text("hello\n")
    sandbox.state.git.refuse_pushes = True
    with pytest.raises(PushRejected, match="403") as caught:
        await _deliver(source, other, refused)

    assert BOT_TOKEN not in str(caught.value)
    assert sandbox.state.pulls(REPO) == []
    assert refused.branch not in sandbox.state.branches(REPO)


def test_repository_rules_are_read_capped_and_confined(tmp_path: Path) -> None:
    (tmp_path / "AGENTS.md").write_text("Run `make test`.\n" + "x" * 100)
    (tmp_path / "CLAUDE.md").write_text("Use tabs.\n")
    (tmp_path / ".github").mkdir()
    outside = tmp_path.parent / f"{tmp_path.name}-secret.txt"
    outside.write_text("host secret\n")
    os.symlink(outside, tmp_path / ".github" / "copilot-instructions.md")

    rules = read_repository_rules(tmp_path, 20)

    assert list(rules) == ["AGENTS.md", "CLAUDE.md"]
    assert rules["AGENTS.md"].startswith("Run `make test`.") and "cut: the file has 117 bytes" in rules["AGENTS.md"]
    assert rules["CLAUDE.md"] == "Use tabs."
    assert read_repository_rules(tmp_path, 0) == {}


# -- clones through the shared mirror (workspace.mirror) ----------------------------------


def _upload_packs(sandbox: GitHubSandbox) -> int:
    """git-upload-pack requests the forge answered: what a clone, a fetch or ls-remote costs it."""
    return sum(1 for entry in sandbox.state.git.requests if entry.service == "git-upload-pack")


async def test_runs_starting_together_share_one_refresh_and_see_a_push_made_before_they_asked(
    sandbox: GitHubSandbox, source: GitHubSource, tmp_path: Path
) -> None:
    mirrors = Mirrors(mirrors_dir(tmp_path / "ws"), depth=1)
    before = _upload_packs(sandbox)
    await _prepare(source, _task(1, "First"), tmp_path / "ws" / "first", mirrors=mirrors)
    one_refresh = _upload_packs(sandbox) - before

    before = _upload_packs(sandbox)
    checkouts = await asyncio.gather(
        *(_prepare(source, _task(n, f"Task {n}"), tmp_path / "ws" / f"run{n}", mirrors=mirrors) for n in range(2, 10))
    )
    assert _upload_packs(sandbox) - before <= 2 * one_refresh, "eight runs, at most two refreshes, no clone each"
    main = sandbox.state.branches(REPO)["main"]
    for n, checkout in zip(range(2, 10), checkouts):
        assert checkout.branch == branch_name(n, f"Task {n}") and checkout.start_sha == main
        assert (checkout.path / "src" / "app.py").read_text() == "x = 3\n"

    sandbox.state.git.commit_files(REPO, "main", {"src/app.py": "x = 4\n"}, "Fourth")
    later = await _prepare(source, _task(10, "Later"), tmp_path / "ws" / "later", mirrors=mirrors)
    assert later.start_sha == sandbox.state.branches(REPO)["main"] != main, "a refresh after it asked"
    assert (later.path / "src" / "app.py").read_text() == "x = 4\n"
    for config in [*mirrors_dir(tmp_path / "ws").glob("*.git/config"), later.git_dir / "config"]:
        text = config.read_text()
        assert BOT_TOKEN not in text and "extraheader" not in text.lower(), config


async def test_runs_picked_up_together_share_a_refresh_even_when_they_start_one_after_another(
    sandbox: GitHubSandbox, source: GitHubSource, tmp_path: Path
) -> None:
    # A run whose claim took longer still uses the refresh a run picked up with it
    # began, since it began after both were picked up; a push after that is seen by the
    # runs picked up after it.
    mirrors = Mirrors(mirrors_dir(tmp_path / "ws"), depth=1)
    picked = time.monotonic()
    first = await _prepare(source, _task(1, "First"), tmp_path / "ws" / "first", mirrors=mirrors, fresh_since=picked)
    before = _upload_packs(sandbox)
    second = await _prepare(source, _task(2, "Second"), tmp_path / "ws" / "second", mirrors=mirrors, fresh_since=picked)
    assert _upload_packs(sandbox) == before, "no second refresh"
    assert second.start_sha == first.start_sha == sandbox.state.branches(REPO)["main"]

    sandbox.state.git.commit_files(REPO, "main", {"src/app.py": "x = 4\n"}, "Fourth")
    later = await _prepare(source, _task(3, "Later"), tmp_path / "ws" / "later", mirrors=mirrors, fresh_since=time.monotonic())
    assert _upload_packs(sandbox) > before, "picked up after the push: a refresh of its own"
    assert later.start_sha == sandbox.state.branches(REPO)["main"] != first.start_sha
    assert (later.path / "src" / "app.py").read_text() == "x = 4\n"


async def test_a_full_mirror_lends_its_objects_and_the_run_delivers_from_it(
    sandbox: GitHubSandbox, source: GitHubSource, tmp_path: Path
) -> None:
    mirrors = Mirrors(mirrors_dir(tmp_path / "ws"), depth=0)
    task = _task(1, "Add a greeting")
    checkout = await _prepare(source, task, tmp_path / "ws" / "one", depth=0, mirrors=mirrors)
    alternates = (checkout.git_dir / "objects" / "info" / "alternates").read_text()
    assert alternates.startswith(str(mirrors_dir(tmp_path / "ws"))), "objects borrowed from the mirror, not copied"
    assert git_client(None, f"--git-dir={checkout.git_dir}", "rev-list", "--count", "HEAD").stdout.strip() == "3"
    (checkout.path / "hello.txt").write_text("hello\n")
    await _deliver(source, task, checkout, "First summary")
    assert sandbox.state.git.read_file(REPO, checkout.branch, "hello.txt") == b"hello\n"

    again = await _prepare(source, _task(1, "Add a greeting, retitled"), tmp_path / "ws" / "two", depth=0, mirrors=mirrors)
    assert again.branch == checkout.branch and again.branch_exists, "the follow-up finds the pushed branch in the mirror"
    assert (again.path / "hello.txt").read_text() == "hello\n"

    number = sandbox.state.create_pull(REPO, "Feature", author="alice", head="feature")
    change = await _prepare(source, _task(number, "Feature", change=True, head="feature"), tmp_path / "ws" / "pr", mirrors=mirrors)
    assert change.branch == "feature" and change.start_sha == sandbox.state.branches(REPO)["feature"]


class _ReadingGit(Git):
    """The host's git, counting what its commands printed: what the agent read."""

    def __init__(self) -> None:
        super().__init__(timeout=60)
        self.read_bytes = 0

    async def run(self, cwd: Path | None, *args: str, **options: Any) -> GitResult:
        result = await super().run(cwd, *args, **options)
        self.read_bytes += len(result.stdout) + len(result.stderr)
        return result


async def test_a_run_through_the_mirror_reads_only_its_own_branches_however_many_there_are(
    sandbox: GitHubSandbox, source: GitHubSource, tmp_path: Path
) -> None:
    """The agent pushes a branch per task: a busy repository has thousands. A run reads
    the few it needs; listing them all, twice a refresh, made each run's work (and the
    memory of a long `serve`) grow with every task ever done."""
    main = sandbox.state.branches(REPO)["main"]
    earlier = sandbox.state.git.create_branch(REPO, "coding-agent/7-first-title", main)
    for number in range(1000, 1300):
        sandbox.state.git.create_branch(REPO, f"coding-agent/{number}-some-task-of-the-past", main)
    mirrors = Mirrors(mirrors_dir(tmp_path / "ws"), depth=1)
    git = _ReadingGit()
    record = tmp_path / "ws" / "run.checkout.json"
    checkout = await prepare_workspace(
        source, _task(7, "Second title"), tmp_path / "ws" / "run", git, depth=1, retry=FAST, record=record, mirrors=mirrors
    )
    assert checkout.branch == "coding-agent/7-first-title" and checkout.branch_exists, "its earlier branch, found"
    assert checkout.start_sha == earlier
    assert git.read_bytes < 2_000, f"{git.read_bytes} bytes read for one run's checkout"


async def test_a_mirror_of_a_repository_whose_head_names_no_branch_still_holds_its_branches(
    sandbox: GitHubSandbox, source: GitHubSource, tmp_path: Path
) -> None:
    """HEAD left pointing at a deleted branch: the refresh cannot tell from HEAD that the
    repository has branches, so it looks, and still fetches them."""
    feature = sandbox.state.git.create_branch(REPO, "feature", "main")
    sandbox.state.git.point_head(REPO, "gone")
    mirrors = Mirrors(mirrors_dir(tmp_path / "ws"), depth=1)
    number = sandbox.state.create_pull(REPO, "Feature", author="alice", head="feature")
    change = await _prepare(source, _task(number, "Feature", change=True, head="feature"), tmp_path / "ws" / "pr", mirrors=mirrors)
    assert change.branch == "feature" and change.branch_exists and change.start_sha == feature
    assert (change.git_dir / "objects" / "info" / "alternates").is_file(), "through the mirror"


async def test_a_shallow_mirror_lends_its_objects_too_and_the_run_delivers_from_it(
    sandbox: GitHubSandbox, source: GitHubSource, tmp_path: Path
) -> None:
    # The default (`clone_depth: 1`): `clone --shared` ignores a shallow source and packs,
    # sends and indexes every object again; the run's clone borrows them instead.
    mirrors = Mirrors(mirrors_dir(tmp_path / "ws"), depth=1)
    task = _task(1, "Add a greeting")
    checkout = await _prepare(source, task, tmp_path / "ws" / "one", mirrors=mirrors)
    [mirror] = mirrors_dir(tmp_path / "ws").glob("*.git")
    assert (checkout.git_dir / "objects" / "info" / "alternates").read_text() == f"{mirror / 'objects'}\n"
    assert (checkout.git_dir / "shallow").read_bytes() == (mirror / "shallow").read_bytes()
    assert not [p for p in (checkout.git_dir / "objects").rglob("*") if p.is_file() and p.parent.name != "info"]
    assert checkout.start_sha == sandbox.state.branches(REPO)["main"] and not checkout.branch_exists
    assert git_client(None, f"--git-dir={checkout.git_dir}", "rev-list", "--count", "HEAD").stdout.strip() == "1"
    assert git_client(None, f"--git-dir={checkout.git_dir}", "branch", "--show-current").stdout.strip() == checkout.branch
    assert git_client(None, f"--git-dir={checkout.git_dir}", "--work-tree", str(checkout.path), "status", "--porcelain").stdout == ""
    assert not (checkout.path / ".git").exists()

    (checkout.path / "hello.txt").write_text("hello\n")
    await _deliver(source, task, checkout, "First summary")
    assert sandbox.state.git.read_file(REPO, checkout.branch, "hello.txt") == b"hello\n"
    assert sandbox.state.branches(REPO)["main"] == checkout.start_sha

    again = await _prepare(source, _task(1, "Add a greeting, retitled"), tmp_path / "ws" / "two", mirrors=mirrors)
    assert again.branch == checkout.branch and again.branch_exists
    assert again.start_sha == sandbox.state.branches(REPO)[checkout.branch] != checkout.start_sha
    assert (again.path / "hello.txt").read_text() == "hello\n"


async def test_a_killed_refresh_s_lock_files_do_not_cost_the_mirror_its_running_clones_borrow_from(
    sandbox: GitHubSandbox, source: GitHubSource, tmp_path: Path
) -> None:
    """A worker killed in the middle of a refresh leaves git's lock files in the mirror,
    and every later fetch into it failed on them. The mirror was then deleted as broken,
    taking the objects away from the clones that running runs (in this process, or in
    others on the machine) borrow them from. A refresh holds the mirror's file lock, so
    any git lock file it finds there is a dead process's: it is removed, and the sound
    mirror is fetched into as usual."""
    mirrors = Mirrors(mirrors_dir(tmp_path / "ws"), depth=1)
    first = await _prepare(source, _task(1, "First"), tmp_path / "ws" / "first", mirrors=mirrors)
    [mirror] = mirrors_dir(tmp_path / "ws").glob("*.git")
    for left in (mirror / "shallow.lock", mirror / "packed-refs.lock", mirror / "refs" / "heads" / "main.lock"):
        left.write_text("")  # as a fetch killed half way leaves them
    sandbox.state.git.commit_files(REPO, "main", {"src/app.py": "x = 4\n"}, "Fourth")

    second = await _prepare(source, _task(2, "Second"), tmp_path / "ws" / "second", mirrors=mirrors)
    assert (second.path / "src" / "app.py").read_text() == "x = 4\n"
    alternates = (second.git_dir / "objects" / "info" / "alternates").read_text()
    assert alternates == f"{mirror / 'objects'}\n", "borrowed from the same mirror"
    assert not list(mirror.rglob("*.lock"))
    status = await _git().run(first.path, "status", "--porcelain")
    assert status.stdout == "", "the first run's clone still has every object it borrowed"


async def test_a_busy_mirror_s_packs_are_rolled_up_and_keep_every_object_clones_borrow(
    sandbox: GitHubSandbox, source: GitHubSource, tmp_path: Path
) -> None:
    """Each refresh left a pack (or loose objects) in the mirror, for ever: every lookup,
    its clones' too, looked through them all. Beyond `max_packs` they are rolled up, and
    no object goes, not even the commit a running clone stands on after its branch was
    deleted on the forge."""
    mirrors = Mirrors(mirrors_dir(tmp_path / "ws"), depth=1, max_packs=3)
    topic = sandbox.state.git.commit_files(REPO, "topic", {"topic.txt": "t\n"}, "Topic")
    first = await _prepare(source, _task(7, "Topic", change=True, head="topic"), tmp_path / "ws" / "pr", mirrors=mirrors)
    [mirror] = mirrors_dir(tmp_path / "ws").glob("*.git")
    await _git().run(None, f"--git-dir={sandbox.state.git.path(REPO)}", "update-ref", "-d", "refs/heads/topic")
    for n in range(6):
        sandbox.state.git.commit_files(REPO, "main", {"src/app.py": f"x = {10 + n}\n"}, f"Commit {n}")
        latest = await _prepare(source, _task(n + 1, f"Task {n}"), tmp_path / "ws" / f"t{n}", mirrors=mirrors)

    assert (latest.path / "src" / "app.py").read_text() == "x = 15\n"
    packs = list((mirror / "objects" / "pack").glob("*.pack"))
    loose = [p for p in (mirror / "objects").rglob("*") if p.is_file() and p.parent.name not in ("pack", "info")]
    assert len(packs) <= 3 and not loose, (packs, loose)
    assert "topic" not in (await _git().run(None, f"--git-dir={mirror}", "branch", "--list")).stdout
    await _git().run(None, f"--git-dir={mirror}", "cat-file", "-e", f"{topic}^{{tree}}")  # raises if it went
    status = await _git().run(first.path, "status", "--porcelain")
    assert status.stdout == "" and (first.path / "topic.txt").read_text() == "t\n"


async def test_a_broken_mirror_costs_one_network_clone_and_is_made_again(
    sandbox: GitHubSandbox, source: GitHubSource, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    mirrors = Mirrors(mirrors_dir(tmp_path / "ws"), depth=1)
    first = await _prepare(source, _task(1, "First"), tmp_path / "ws" / "first", mirrors=mirrors)
    [mirror] = mirrors_dir(tmp_path / "ws").glob("*.git")
    shutil.rmtree(mirror / "objects")
    (mirror / "objects").write_text("not a directory\n")  # as a crash or a full disk might leave it
    sandbox.state.git.commit_files(REPO, "main", {"src/app.py": "x = 4\n"}, "Fourth")

    second = await _prepare(source, _task(2, "Second"), tmp_path / "ws" / "second", mirrors=mirrors)
    assert second.start_sha == sandbox.state.branches(REPO)["main"] != first.start_sha
    assert (second.path / "src" / "app.py").read_text() == "x = 4\n", "cloned from the forge instead"
    assert "cloning from the forge" in caplog.text
    assert not mirror.exists(), "the broken mirror was removed"

    third = await _prepare(source, _task(3, "Third"), tmp_path / "ws" / "third", mirrors=mirrors)
    assert (mirror / "objects").is_dir(), "the mirror was made again"
    assert third.start_sha == second.start_sha

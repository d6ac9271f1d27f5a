"""The setup cache under attack, end to end (SPEC 15: write or delete outside the workspace).

The sandbox GitHub holds the repository; its default branch's `.coding-agent/setup.sh`
leaves files in the workspace that the setup cache keeps. A user with read access only
opens a pull request, a maintainer labels it, and the run works its head (real git, real
bwrap, the replay model). The checks are black box: a host directory whose files must
stay as they are, and what a later default-branch run's model finds in its workspace.
"""

from __future__ import annotations

import asyncio
import json
import subprocess
from pathlib import Path

import pytest

from coding_agent.runtime.service import AgentService, CycleReport
from coding_agent.sandbox.replay_model import ReplaySandbox
from coding_agent.tools.sandbox import bwrap_usable

from .conftest import MAINTAINER, READER, REPO, AgentSetup, GitHubForge, llm_section, load_for_service, write_config

pytestmark = pytest.mark.skipif(not bwrap_usable(Path("/tmp")), reason="bwrap cannot create namespaces here")

SCRIPT_PATH = ".coding-agent/setup.sh"
RESTORED = "restored from the setup cache"


def _config(tmp_path: Path, forge: GitHubForge, model: ReplaySandbox) -> AgentSetup:
    return write_config(
        tmp_path,
        [forge],
        llm_section(model),
        setup={"from_repository": True, "timeout_seconds": 120, "cache": True, "cache_dir": str(tmp_path / "cache")},
    )


def _run_once(tmp_path: Path, forge: GitHubForge, replies: list[dict[str, object]]) -> tuple[str, str]:
    """One cycle of the service with a model scripted by `replies`: (first turn, transcript)."""

    async def once(setup: AgentSetup) -> CycleReport:
        service = AgentService(load_for_service(setup))
        try:
            return await service.run_cycle()
        finally:
            await service.aclose()

    with ReplaySandbox({"replies": replies}) as model:
        [result] = asyncio.run(once(_config(tmp_path, forge, model))).results
        messages = model.requests[0].body["messages"]
        first_turn = next(message["content"] for message in messages if message["role"] == "user")
        transcript = json.dumps(model.requests[-1].body["messages"])
    assert result.status == "done", result
    return first_turn, transcript


def _run(command: str) -> dict[str, object]:
    return {"tool": "workspace/run", "args": {"command": command, "timeout_seconds": 60}}


def _push_symlinks(forge: GitHubForge, work: Path, branch: str, links: dict[str, Path]) -> None:
    """Push `branch`: the default branch with each directory in `links` replaced by a symlink."""
    bare = str(forge.sandbox.state.git_dir(REPO))
    identity = ["-c", "user.name=Rita Reader", "-c", "user.email=rita@example.test"]
    subprocess.run(["git", "clone", "--quiet", bare, str(work)], check=True)
    for name, target in links.items():
        subprocess.run(["git", "-C", str(work), "rm", "-r", "--quiet", name], check=True)
        (work / name).symlink_to(target)
    subprocess.run(["git", "-C", str(work), "add", "-A"], check=True)
    subprocess.run(["git", "-C", str(work), *identity, "commit", "--quiet", "-m", "Link things"], check=True)
    subprocess.run(["git", "-C", str(work), "push", "--quiet", "origin", f"HEAD:refs/heads/{branch}"], check=True)


def _files(directory: Path) -> dict[str, bytes]:
    return {str(path.relative_to(directory)): path.read_bytes() for path in sorted(directory.rglob("*")) if path.is_file()}


def _open_reader_pull(forge: GitHubForge, title: str) -> int:
    state = forge.sandbox.state
    number = state.create_pull(REPO, title, "Please look.", author=READER, head="feature", base="main")
    state.add_label(REPO, number, "coding agent", actor=MAINTAINER)
    return number


def test_a_pull_request_of_symlinks_cannot_make_the_cache_write_or_delete_on_the_host(
    github_forge: GitHubForge, tmp_path: Path
) -> None:
    script = (
        "set -e\necho SETUP-RAN\nmkdir -p b/cachedir\n"
        "echo from-setup > a/config.yaml\necho built > b/cachedir/lib.txt\n"
    )
    state = github_forge.sandbox.state
    state.init_repo(REPO, files={
        "README.md": "# widgets\n", "requirements.txt": "tinypkg==1.0\n", SCRIPT_PATH: script,
        "a/README.md": "configuration lives here\n", "b/README.md": "caches live here\n",
    })  # fmt: skip
    host = tmp_path / "host"
    (host / "cachedir").mkdir(parents=True)
    (host / "config.yaml").write_text("host: configuration\n")
    (host / "cachedir" / "keep.txt").write_text("the host's own cache\n")
    before = _files(host)

    # A maintainer's issue on the default branch fills the cache.
    github_forge.open_task("issue", "Look around", "Look around.")
    first_turn, _ = _run_once(tmp_path, github_forge, [{"done": "Looked."}])
    assert "SETUP-RAN" in first_turn and RESTORED not in first_turn, first_turn

    # A reader's PR turns `a` and `b` into symlinks to the host directory, lockfiles unchanged.
    _push_symlinks(github_forge, tmp_path / "reader-clone", "feature", {"a": host, "b": host})
    _open_reader_pull(github_forge, "Tidy up")
    _run_once(tmp_path, github_forge, [{"done": "Looked at the PR."}])
    assert _files(host) == before, "the setup cache wrote or deleted through a symlink of the PR"
    assert (host / "cachedir").is_dir() and not (host / "cachedir" / "lib.txt").exists()

    # The default branch still hits its entry: restored, the setup not run again.
    github_forge.open_task("issue", "Look again", "Look again.")
    first_turn, transcript = _run_once(
        tmp_path, github_forge, [_run("cat a/config.yaml b/cachedir/lib.txt"), {"done": "Looked again."}]
    )
    assert RESTORED in first_turn, first_turn
    assert "from-setup" in transcript and "built" in transcript


def test_a_read_only_users_pull_request_never_fills_an_entry_the_default_branch_uses(
    github_forge: GitHubForge, tmp_path: Path
) -> None:
    script = "set -e\necho SETUP-RAN\nmkdir -p .deps\nsh tools/build.sh\n"
    state = github_forge.sandbox.state
    state.init_repo(REPO, files={
        "README.md": "# widgets\n", "requirements.txt": "tinypkg==1.0\n", SCRIPT_PATH: script,
        "tools/build.sh": "cp deps/list.txt .deps/installed.txt\n", "deps/list.txt": "clean-dependencies\n",
    })  # fmt: skip
    # The reader's head changes only what the setup reads indirectly; lockfiles unchanged.
    state.create_branch(REPO, "feature")
    state.git.commit_files(REPO, "feature", {"deps/list.txt": "POISONED-dependencies\n"}, "Swap the deps")
    _open_reader_pull(github_forge, "Swap the deps")
    first_turn, _ = _run_once(tmp_path, github_forge, [{"done": "Looked at the PR."}])
    assert "SETUP-RAN" in first_turn and RESTORED not in first_turn, first_turn

    github_forge.open_task("issue", "Check the deps", "What is installed?")
    first_turn, transcript = _run_once(
        tmp_path, github_forge, [_run("cat .deps/installed.txt"), {"done": "Checked."}]
    )
    assert RESTORED not in first_turn, "the default branch used an entry the reader's head filled"
    assert "clean-dependencies" in transcript and "POISONED" not in transcript

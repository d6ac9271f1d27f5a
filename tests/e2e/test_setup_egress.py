"""Environment setup and the egress allow-list end to end (SPEC 7.1, issue 12).

The sandbox forge holds the repository; its default branch has `.coding-agent/setup.sh`,
which installs a wheel from a local PEP 503 index (a real HTTP server on 127.0.0.1)
through the egress proxy; the replay model then `run`s commands in the real bwrap
sandbox. The tests read what the model was told (the recorded requests), the PR body,
the progress comment and the index's own request log.
"""

from __future__ import annotations

import asyncio
import json
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from coding_agent.runtime.service import AgentService, CycleReport
from coding_agent.sandbox.replay_model import ReplaySandbox
from coding_agent.tools.sandbox import bwrap_usable
from tests.support.package_index import PackageIndex

from .conftest import (
    MAINTAINER,
    READER,
    REPO,
    AgentSetup,
    ForgeUnderTest,
    GitHubForge,
    llm_section,
    load_for_service,
    progress_comments,
    write_config,
)

SCRIPT_PATH = ".coding-agent/setup.sh"
MARKER = "SETUP-MARKER-FROM-DEFAULT-BRANCH"


def _system_python() -> str | None:
    """A python3 with pip under /usr (always visible inside the sandbox)."""
    for candidate in ("/usr/bin/python3", "/usr/local/bin/python3"):
        if Path(candidate).exists():
            probe = subprocess.run([candidate, "-m", "pip", "--version"], capture_output=True, check=False)
            if probe.returncode == 0:
                return candidate
    return None


PYTHON = _system_python()
pytestmark = [
    pytest.mark.skipif(not bwrap_usable(Path("/tmp")), reason="bwrap cannot create namespaces here"),
    pytest.mark.skipif(PYTHON is None or shutil.which("curl") is None,
                       reason="needs a system python3 with pip (also the sandbox's forwarder), and curl"),  # fmt: skip
]


@pytest.fixture(scope="module")
def index() -> Iterator[PackageIndex]:
    with PackageIndex() as served:
        yield served


def _setup_script(index: PackageIndex, marker: str = MARKER, retries: int | None = None) -> str:
    """`retries`: pip's own retries of a failed connection (default 5, with backoff: about
    8 s of waiting when the proxy refuses, which tells nothing more than the first refusal)."""
    retry = "" if retries is None else f"--retries {retries} "
    return (
        "set -e\n"
        f"echo {marker}\n"
        f"{PYTHON} -m pip install --disable-pip-version-check --no-cache-dir {retry}--index-url {index.simple_url} "
        "--target .deps tinypkg\n"
    )


def _run_once(setup: AgentSetup) -> CycleReport:
    async def once() -> CycleReport:
        service = AgentService(load_for_service(setup))
        try:
            return await service.run_cycle()
        finally:
            await service.aclose()

    return asyncio.run(once())


def _run(command: str) -> dict[str, Any]:
    return {"tool": "workspace/run", "args": {"command": command, "timeout_seconds": 60}}


def _config(
    tmp_path: Path, forge: ForgeUnderTest, model: ReplaySandbox, setup_hosts: list[str], run_hosts: list[str],
    **setup: object,
) -> AgentSetup:  # fmt: skip
    return write_config(
        tmp_path,
        [forge],
        llm_section(model),
        setup={"from_repository": True, "timeout_seconds": 120, "cache": True, "cache_dir": str(tmp_path / "cache"),
               **setup},  # fmt: skip
        security={"egress": {"setup_hosts": setup_hosts, "run_hosts": run_hosts}},
    )


def _transcript(model: ReplaySandbox) -> str:
    """Everything the model was sent in its last request (first turn and tool results)."""
    return json.dumps(model.requests[-1].body["messages"])


def _first_turn(model: ReplaySandbox) -> str:
    messages = model.requests[0].body["messages"]
    return next(message["content"] for message in messages if message["role"] == "user")


def test_setup_installs_from_the_listed_index_and_run_is_confined(
    github_forge: GitHubForge, index: PackageIndex, tmp_path: Path
) -> None:
    listed = f"127.0.0.1:{index.port}"
    state = github_forge.sandbox.state
    state.init_repo(REPO, files={"README.md": "# widgets\n", SCRIPT_PATH: _setup_script(index)})
    number = github_forge.open_task("issue", "Use tinypkg", "Check that tinypkg imports.")
    script = {
        "replies": [
            _run(f"PYTHONPATH=.deps {PYTHON} -c 'import tinypkg; print(\"imported\", tinypkg.VALUE)'"),
            _run(f"curl -sS http://{listed}/hello"),
            _run("curl -sS http://unlisted.example/"),
            _run("curl -sS http://169.254.169.254/"),
            {"tool": "workspace/create", "args": {"path": "hello.txt", "content": "hi\n"}},
            {"done": "Checked tinypkg."},
        ]
    }
    wheel_downloads = index.requests.count(f"/files/{index.wheel_name}")
    with ReplaySandbox(script) as model:
        setup = _config(tmp_path, github_forge, model, [listed], [listed])
        [result] = _run_once(setup).results
        first_turn, transcript = _first_turn(model), _transcript(model)

    assert result.status == "done"
    assert MARKER in first_turn and "succeeded" in first_turn, first_turn
    assert "imported egress-ok" in transcript, "the model's run imports what the setup installed"
    assert "hello through the proxy" in transcript, "a listed host is reachable from run"
    assert transcript.count("coding-agent egress proxy refused the request") == 2
    assert index.requests.count(f"/files/{index.wheel_name}") == wheel_downloads + 1
    [pull] = state.pulls(REPO)
    assert "blocked: unlisted.example:80, by `curl -sS http://unlisted.example/`" in pull.body
    assert "blocked: 169.254.169.254:80, by `curl -sS http://169.254.169.254/`" in pull.body
    assert f"127.0.0.1:{index.port}," not in pull.body, "the listed host is not reported as blocked"
    assert state.git.read_file(REPO, pull.head, ".deps/tinypkg/__init__.py") is None, "setup output not committed"

    # A second task on the same repository: the setup is restored from the cache, not run.
    second = github_forge.open_task("issue", "Use tinypkg again", "Check again.")
    again = {"replies": [_run(f"PYTHONPATH=.deps {PYTHON} -c 'import tinypkg; print(\"again\", tinypkg.VALUE)'"),
                         {"done": "Still fine."}]}  # fmt: skip
    with ReplaySandbox(again) as model:
        setup = _config(tmp_path, github_forge, model, [listed], [listed])  # same cache_dir
        [result] = _run_once(setup).results
        first_turn, transcript = _first_turn(model), _transcript(model)
    assert result.status == "done" and second != number
    assert "restored from the setup cache" in first_turn and MARKER in first_turn
    assert index.requests.count(f"/files/{index.wheel_name}") == wheel_downloads + 1, "the setup did not run again"
    assert "again egress-ok" in transcript


def test_empty_allow_list_fails_setup_cleanly_and_the_model_is_told(
    github_forge: GitHubForge, index: PackageIndex, tmp_path: Path
) -> None:
    state = github_forge.sandbox.state
    state.init_repo(REPO, files={"README.md": "# widgets\n", SCRIPT_PATH: _setup_script(index, retries=1)})
    number = github_forge.open_task("issue", "Use tinypkg", "Check that tinypkg imports.")
    with ReplaySandbox({"replies": [{"done": "Could not install."}]}) as model:
        setup = _config(tmp_path, github_forge, model, [], [])
        [result] = _run_once(setup).results
        first_turn = _first_turn(model)

    assert result.status == "done", "a failed setup does not fail the run"
    assert MARKER in first_turn and "failed with exit code" in first_turn
    assert "refused" in first_turn or "403" in first_turn, first_turn
    bodies = [body for _, body in github_forge.comments("issue", number)]
    [progress] = progress_comments(bodies)
    assert "Environment setup" in progress and "failed with exit code" in progress


def test_untrusted_pr_head_cannot_change_the_setup(forge: ForgeUnderTest, tmp_path: Path) -> None:
    state = forge.sandbox.state  # type: ignore[attr-defined]
    state.init_repo(REPO, files={"README.md": "# widgets\n", SCRIPT_PATH: "echo SETUP-FROM-DEFAULT\n"})
    state.create_branch(REPO, "feature")
    state.git.commit_files(REPO, "feature", {SCRIPT_PATH: "echo SETUP-FROM-PR-HEAD\n"}, "change the setup")
    if isinstance(forge, GitHubForge):
        number = state.create_pull(REPO, "Tweak", "A PR.", author=READER, head="feature", base="main")
        state.add_label(REPO, number, "coding agent", actor=MAINTAINER)
    else:
        number = state.create_merge_request(REPO, "Tweak", "An MR.", author=READER, source_branch="feature")
        state.add_label(REPO, number, "coding agent", actor=MAINTAINER, kind="mr")
    with ReplaySandbox({"replies": [{"done": "Looked."}]}) as model:
        setup = _config(tmp_path, forge, model, [], [])
        [result] = _run_once(setup).results
        first_turn = _first_turn(model)

    assert result.status == "done"
    assert "SETUP-FROM-DEFAULT" in first_turn and "SETUP-FROM-PR-HEAD" not in first_turn


def test_setup_filling_the_disk_is_killed_and_the_run_goes_on(github_forge: GitHubForge, tmp_path: Path) -> None:
    """Issue 12, Bad input: killed at `setup.max_disk_mb` with its tree, the model is told,
    the workspace is as cloned, and the run delivers."""
    fill = "mkdir -p .deps\necho FILLING\ni=0; while :; do head -c 1048576 /dev/zero > .deps/blob$i; i=$((i+1)); sleep 0.02; done\n"
    state = github_forge.sandbox.state
    state.init_repo(REPO, files={"README.md": "# widgets\n", SCRIPT_PATH: fill})
    number = github_forge.open_task("issue", "Add hello", "Add hello.txt.")
    script = {
        "replies": [
            _run("ls -A; git status --short"),
            {"tool": "workspace/create", "args": {"path": "hello.txt", "content": "hi\n"}},
            {"done": "Added hello.txt."},
        ]
    }
    with ReplaySandbox(script) as model:
        setup = _config(tmp_path, github_forge, model, [], [], max_disk_mb=2)
        [result] = _run_once(setup).results
        first_turn, transcript = _first_turn(model), _transcript(model)

    assert result.status == "done", "a setup killed at its disk limit does not fail the run"
    assert "FILLING" in first_turn and "wrote more than its limit of 2 MB (setup.max_disk_mb)" in first_turn
    assert ".deps" not in transcript and "README.md" in transcript, "the workspace is as cloned"
    [pull] = state.pulls(REPO)
    assert state.git.read_file(REPO, pull.head, "hello.txt") == b"hi\n"
    assert state.git.read_file(REPO, pull.head, ".deps/blob0") is None
    bodies = [body for _, body in github_forge.comments("issue", number)]
    [progress] = progress_comments(bodies)
    assert "wrote more than its limit of 2 MB" in progress


def test_a_run_with_a_deep_temp_directory_reaches_its_listed_host(
    github_forge: GitHubForge, index: PackageIndex, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A Unix socket's path has at most 107 bytes: with a 150-character TMPDIR the proxy's
    socket goes where its path fits, and the run works as with any other."""
    deep = tmp_path / ("d" * max(1, 149 - len(str(tmp_path))))
    deep.mkdir()
    assert len(str(deep)) >= 150
    monkeypatch.setenv("TMPDIR", str(deep))
    monkeypatch.setattr(tempfile, "tempdir", None)  # read TMPDIR again
    listed = f"127.0.0.1:{index.port}"
    github_forge.sandbox.state.init_repo(REPO, files={"README.md": "# widgets\n"})
    github_forge.open_task("issue", "Reach the index", "Check that the index answers.")
    script = {"replies": [_run(f"curl -sS http://{listed}/hello"), {"done": "The index answers."}]}
    with ReplaySandbox(script) as model:
        [result] = _run_once(_config(tmp_path, github_forge, model, [], [listed])).results
        assert result.status == "done"
        assert "hello through the proxy" in _transcript(model)

"""Delivery end to end (SPEC 7): clone, branch, commit, push, and the draft PR/MR.

The agent runs as a user runs it (the CLI, or the service in-process) against the
sandbox forges, whose repositories are real git over smart HTTP; the tests then clone
the forge's branches afresh and look at the PRs/MRs, comments and labels.
"""

from __future__ import annotations

import asyncio
import base64
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from coding_agent.runtime.service import AgentService, CycleReport
from coding_agent.sandbox.faults import Fault
from coding_agent.sandbox.git_http import git_client
from coding_agent.sandbox.replay_model import ReplaySandbox
from coding_agent.tools.host_git import git_dir_for
from tests.support.waiting import wait_for

from ._forge_git import branch_file, task_branch
from .conftest import (
    BOT,
    GITHUB_BOT_TOKEN,
    HELLO_SCRIPT,
    MAINTAINER,
    REPO,
    SECRETS,
    AgentSetup,
    ForgeUnderTest,
    GitHubForge,
    GitLabForge,
    llm_section,
    load_for_service,
    secret_env,
    write_config,
)

READER_TOKEN = "t-e2e-maintainer-clone"
SUMMARY = "Wrote hello.txt with a greeting."


def _run_once(setup: AgentSetup) -> CycleReport:
    """One poll cycle of the service in-process: the code `run --once` runs."""

    async def once() -> CycleReport:
        service = AgentService(load_for_service(setup))
        try:
            return await service.run_cycle()
        finally:
            await service.aclose()

    return asyncio.run(once())


def _clone(forge: ForgeUnderTest, branch: str, destination: Path) -> Path:
    """Clone `branch` afresh from the forge, as the maintainer."""
    if isinstance(forge, GitHubForge):
        forge.sandbox.state.add_user(MAINTAINER, token=READER_TOKEN)
    else:
        forge.sandbox.state.add_token(MAINTAINER, READER_TOKEN)  # type: ignore[union-attr]
    url = f"{forge.url}/{REPO}.git"
    git_client(None, "clone", "--quiet", "--branch", branch, url, str(destination), token=READER_TOKEN)
    return destination


def _branches(forge: ForgeUnderTest) -> dict[str, str]:
    return forge.sandbox.state.branches(REPO)  # type: ignore[attr-defined]


def _changes(forge: ForgeUnderTest) -> list[Any]:
    """The forge's pull requests (GitHub) or merge requests (GitLab)."""
    if isinstance(forge, GitHubForge):
        return forge.sandbox.state.pulls(REPO)
    project = forge.sandbox.state.require_project(REPO)  # type: ignore[attr-defined]
    return list(project.merge_requests.values())


def test_github_issue_ends_with_a_draft_pull_request(
    github_forge: GitHubForge, replay: ReplaySandbox, tmp_path: Path
) -> None:
    state = github_forge.sandbox.state
    state.init_repo(REPO, files={"README.md": "# widgets\n", "AGENTS.md": "Always end files with a newline.\n"})
    number = github_forge.open_task("issue", "Add a greeting file", "Please add hello.txt with a greeting.")
    setup = write_config(tmp_path, [github_forge], llm_section(replay))

    report = _run_once(setup)

    assert report.errors == () and [r.status for r in report.results] == ["done"], report
    [pull] = state.pulls(REPO)
    assert pull.draft and pull.head.startswith(f"coding-agent/{number}-add-a-greeting") and pull.base == "main"
    assert pull.body.startswith(f"Closes #{number}") and SUMMARY in pull.body
    clone = _clone(github_forge, pull.head, tmp_path / "fresh")
    assert (clone / "hello.txt").read_text() == "hello from the agent\n"
    message = git_client(clone, "log", "-1", "--format=%an%n%B").stdout
    assert message.startswith(f"{BOT}\n{SUMMARY}") and f"Co-authored-by: {MAINTAINER} <" in message
    final = github_forge.comments("issue", number)[-1][1]
    assert final.startswith(SUMMARY) and f"{github_forge.url}/{REPO}/pull/{pull.number}" in final
    labels = github_forge.labels("issue", number)
    assert "coding agent done" in labels and "coding agent processing" not in labels
    system_prompt = replay.requests[0].body["messages"][0]["content"]
    assert "Always end files with a newline." in system_prompt, "the repository's AGENTS.md reached the model"


def test_gitlab_issue_ends_with_a_draft_merge_request(
    gitlab_forge: GitLabForge, replay: ReplaySandbox, tmp_path: Path
) -> None:
    number = gitlab_forge.open_task("issue", "Add a greeting file", "Please add hello.txt with a greeting.")
    setup = write_config(tmp_path, [gitlab_forge], llm_section(replay))

    [result] = _run_once(setup).results

    assert result.status == "done"
    [mr] = _changes(gitlab_forge)
    assert mr.draft and mr.title == "Draft: Add a greeting file" and mr.target_branch == "main"
    assert mr.source_branch.startswith(f"coding-agent/{number}-") and mr.description.startswith(f"Closes #{number}")
    clone = _clone(gitlab_forge, mr.source_branch, tmp_path / "fresh")
    assert (clone / "hello.txt").read_text() == "hello from the agent\n"
    final = gitlab_forge.comments("issue", number)[-1][1]
    assert f"{gitlab_forge.url}/{REPO}/-/merge_requests/{mr.iid}" in final and "merge request !" in final
    assert "coding agent done" in gitlab_forge.labels("issue", number)


def test_change_tasks_push_to_their_head_branch(forge: ForgeUnderTest, replay: ReplaySandbox, tmp_path: Path) -> None:
    number = forge.open_task("change", "Add a greeting file", "Please add hello.txt.")
    before = _branches(forge)["feature"]
    setup = write_config(tmp_path, [forge], llm_section(replay))

    [result] = _run_once(setup).results

    assert result.status == "done"
    after = _branches(forge)
    assert after["feature"] != before and set(after) == {"main", "feature"}
    clone = _clone(forge, "feature", tmp_path / "fresh")
    assert (clone / "hello.txt").read_text() == "hello from the agent\n"
    assert git_client(clone, "rev-parse", "HEAD~1").stdout.strip() == before, "one new commit on the head branch"
    assert len(_changes(forge)) == 1, "no new PR/MR for a PR/MR task"
    assert "to `feature`" in forge.comments("change", number)[-1][1]


def test_a_follow_up_run_updates_the_same_pull_request(github_forge: GitHubForge, tmp_path: Path) -> None:
    script = {
        **HELLO_SCRIPT,
        "conversations": [
            {
                "match": "also add bye.txt",
                "replies": [
                    {"tool": "workspace/create", "args": {"path": "bye.txt", "content": "bye\n"}},
                    {"done": "Added bye.txt as well."},
                ],
            }
        ],
    }
    state = github_forge.sandbox.state
    number = github_forge.open_task("issue", "Add a greeting file", "Please add hello.txt.")
    with ReplaySandbox(script) as model:
        setup = write_config(tmp_path, [github_forge], llm_section(model))
        assert [r.status for r in _run_once(setup).results] == ["done"]
        [first] = state.pulls(REPO)
        state.add_comment(REPO, number, MAINTAINER, "Thanks! Please also add bye.txt.")
        state.add_label(REPO, number, "coding agent", actor=MAINTAINER)
        assert [r.status for r in _run_once(setup).results] == ["done"]

    [pull] = state.pulls(REPO)
    assert pull.number == first.number, "the follow-up updated the PR, it did not open a second one"
    assert "Added bye.txt as well." in pull.body and SUMMARY not in pull.body
    clone = _clone(github_forge, pull.head, tmp_path / "fresh")
    assert (clone / "hello.txt").is_file() and (clone / "bye.txt").read_text() == "bye\n"
    final = github_forge.comments("issue", number)[-1][1]
    assert final.startswith("Added bye.txt as well.") and f"updated pull request #{pull.number}" in final


def test_a_run_without_changes_pushes_nothing(forge: ForgeUnderTest, tmp_path: Path) -> None:
    number = forge.open_task("issue", "What is the answer?", "Just answer, please.")
    with ReplaySandbox({"replies": [{"done": "The answer is 42."}]}) as model:
        setup = write_config(tmp_path, [forge], llm_section(model))
        [result] = _run_once(setup).results

    assert result.status == "done"
    assert set(_branches(forge)) == {"main"} and _changes(forge) == []
    assert forge.comments("issue", number)[-1][1] == "The answer is 42."


def test_github_review_thread_request_is_answered_in_the_thread(
    github_forge: GitHubForge, replay: ReplaySandbox, tmp_path: Path
) -> None:
    state = github_forge.sandbox.state
    number = github_forge.open_task("change", "Greeting", "A PR.")
    root = state.add_review_comment(REPO, number, MAINTAINER, "Please add hello.txt next to this.", "README.md", 1)
    setup = write_config(tmp_path, [github_forge], llm_section(replay))

    [result] = _run_once(setup).results

    assert result.status == "done"
    replies = [c for c in state.review_comments(REPO, number) if c.in_reply_to_id == root]
    assert [c.author for c in replies] == [BOT]
    assert replies[0].body.startswith(SUMMARY) and "Pushed `" in replies[0].body
    assert not any(body.startswith(SUMMARY) for _, body in github_forge.comments("change", number))


def test_gitlab_discussion_request_is_answered_in_the_discussion(
    gitlab_forge: GitLabForge, replay: ReplaySandbox, tmp_path: Path
) -> None:
    state = gitlab_forge.sandbox.state
    number = gitlab_forge.open_task("change", "Greeting", "An MR.")
    discussion = state.add_discussion(REPO, number, MAINTAINER, "Please add hello.txt here.")
    setup = write_config(tmp_path, [gitlab_forge], llm_section(replay))

    [result] = _run_once(setup).results

    assert result.status == "done"
    [thread] = [d for d in state.discussions(REPO, number) if d.id == discussion]
    notes = {note.id: note for note in state.notes(REPO, number, kind="mr")}
    bodies = [notes[note_id].body for note_id in thread.note_ids]
    assert bodies[0] == "Please add hello.txt here." and bodies[-1].startswith(SUMMARY)


_BROKEN_SERVER = {"mcp_server_name": "broken", "command": [sys.executable, "-c", "raise SystemExit(3)"]}


def test_github_review_thread_request_hears_of_a_failed_start_in_the_thread(
    github_forge: GitHubForge, tmp_path: Path
) -> None:
    """A run that fails before it reads its conversation (here a tool server that will not
    start) still answers the thread that asked for it, as a run that got further does."""
    state = github_forge.sandbox.state
    number = github_forge.open_task("change", "Greeting", "A PR.")
    root = state.add_review_comment(REPO, number, MAINTAINER, "Please add hello.txt next to this.", "README.md", 1)
    with ReplaySandbox({"replies": [{"done": "Never asked."}]}) as model:
        setup = write_config(tmp_path, [github_forge], llm_section(model), mcp_servers=[_BROKEN_SERVER])
        [result] = _run_once(setup).results

    assert result.status == "failed"
    replies = [c for c in state.review_comments(REPO, number) if c.in_reply_to_id == root]
    assert [c.author for c in replies] == [BOT] and "broken" in replies[0].body, replies
    assert not any("broken" in body for _, body in github_forge.comments("change", number))


def test_a_failed_start_whose_thread_cannot_be_read_is_answered_at_the_top(
    github_forge: GitHubForge, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Not knowing where to answer is no reason not to answer: when the read that would
    name the asking thread fails too, the failure notice goes to the top of the PR, and
    the log says why it did not go to the thread."""
    state = github_forge.sandbox.state
    number = github_forge.open_task("change", "Greeting", "A PR.")
    root = state.add_review_comment(REPO, number, MAINTAINER, "Please add hello.txt next to this.", "README.md", 1)
    review_comments = rf"^GET /repos/{REPO}/pulls/{number}/comments$"
    github_forge.sandbox.faults.add(Fault(pattern=review_comments, count=100, status=403))
    with ReplaySandbox({"replies": [{"done": "Never asked."}]}) as model:
        setup = write_config(tmp_path, [github_forge], llm_section(model), mcp_servers=[_BROKEN_SERVER])
        [result] = _run_once(setup).results

    assert result.status == "failed"
    assert github_forge.sandbox.faults.injected >= 1, "the thread's read was attempted and failed"
    assert not [c for c in state.review_comments(REPO, number) if c.in_reply_to_id == root]
    assert any("broken" in body for author, body in github_forge.comments("change", number) if author == BOT)
    warnings = [r.getMessage() for r in caplog.records if r.levelname == "WARNING"]
    assert any("the thread that asked for the run is unknown" in line and "403" in line for line in warnings), warnings


def test_gitlab_discussion_request_hears_of_a_failed_start_in_the_discussion(
    gitlab_forge: GitLabForge, tmp_path: Path
) -> None:
    state = gitlab_forge.sandbox.state
    number = gitlab_forge.open_task("change", "Greeting", "An MR.")
    discussion = state.add_discussion(REPO, number, MAINTAINER, "Please add hello.txt here.")
    with ReplaySandbox({"replies": [{"done": "Never asked."}]}) as model:
        setup = write_config(tmp_path, [gitlab_forge], llm_section(model), mcp_servers=[_BROKEN_SERVER])
        [result] = _run_once(setup).results

    assert result.status == "failed"
    [thread] = [d for d in state.discussions(REPO, number) if d.id == discussion]
    notes = {note.id: note for note in state.notes(REPO, number, kind="mr")}
    bodies = [notes[note_id].body for note_id in thread.note_ids]
    assert len(bodies) == 2 and "broken" in bodies[-1], bodies


def _tool_process_pids(marker: bytes) -> list[int]:
    """Processes of the model's `run` command (bwrap and the shell in it), by a word of the command.

    (The built-in MCP server runs inside the agent process, which holds the token by
    design; the processes the model's commands run in must not.)
    """
    pids = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            cmdline = (entry / "cmdline").read_bytes()
        except OSError:
            continue
        if marker in cmdline:
            pids.append(int(entry.name))
    return pids


def test_the_token_reaches_no_tool_process_config_or_file(github_forge: GitHubForge, tmp_path: Path) -> None:
    """The forge token: in none of .git/config, the tool processes' environment, `env`, the logs."""
    gate = "touch .gate-waiting; while [ ! -f .gate-open ]; do sleep 0.02; done; rm -f .gate-waiting .gate-open; env > env.txt"
    script = {
        "replies": [
            {"tool": "workspace/run", "args": {"command": gate}, "comment": "Looking at the environment."},
            {"done": "Recorded the environment in env.txt."},
        ]
    }
    number = github_forge.open_task("issue", "Record the environment", "Run env.")
    with ReplaySandbox(script) as model:
        setup = write_config(tmp_path, [github_forge], llm_section(model))
        env = {**os.environ, **secret_env()}
        command = [sys.executable, "-m", "coding_agent.cli", "run", "--once", "--config", str(setup.config_path)]
        process = subprocess.Popen(command, cwd=tmp_path, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        try:
            waiting = wait_for(lambda: list(setup.workspaces.glob("*/.gate-waiting")), 60, "the model's command to start")
            workspace = waiting[0].parent
            pids = wait_for(lambda: _tool_process_pids(b".gate-open"), 60, "the model's command's processes")
            environments = {pid: Path(f"/proc/{pid}/environ").read_bytes() for pid in pids}
            git_config = (git_dir_for(workspace) / "config").read_text()
            (workspace / ".gate-open").touch()
            out, err = process.communicate(timeout=180)
        finally:
            if process.poll() is None:
                process.kill()
    assert process.returncode == 0, err

    encoded = base64.b64encode(f"x-access-token:{GITHUB_BOT_TOKEN}".encode()).decode()
    forbidden = [*SECRETS, encoded]
    env_output = branch_file(github_forge, task_branch(github_forge, number), "env.txt") or ""
    assert "PATH=" in env_output, "the model's env command really ran"
    logs = "\n".join(path.read_text(errors="replace") for path in setup.logs.rglob("*") if path.is_file())
    assert "pushed" in logs, "the log covers the delivery"
    places = {"git config": git_config, "env output": env_output, "logs": logs, "cli output": out + err}
    places.update({f"tool process {pid} environ": data.decode(errors="replace") for pid, data in environments.items()})
    for secret in forbidden:
        for where, text in places.items():
            assert secret not in text, f"the token leaked into {where}"
    [pull] = github_forge.sandbox.state.pulls(REPO)
    pushed_env = github_forge.sandbox.state.git.read_file(REPO, pull.head, "env.txt") or b""
    assert pushed_env and GITHUB_BOT_TOKEN.encode() not in pushed_env
    assert "coding agent done" in github_forge.labels("issue", number)


@pytest.mark.parametrize("rejection", ["non-fast-forward", "403"])
def test_a_rejected_push_fails_the_run_with_a_clear_comment(
    forge: ForgeUnderTest, rejection: str, replay: ReplaySandbox, tmp_path: Path
) -> None:
    git = forge.sandbox.state.git  # type: ignore[attr-defined]
    if rejection == "403":
        number = forge.open_task("issue", "Add a greeting file", "Please add hello.txt.")
        git.refuse_pushes = True
    else:
        number = forge.open_task("change", "Add a greeting file", "Please add hello.txt.")
        git.race_next_push(REPO, "feature")
    changes_before = len(_changes(forge))
    kind = "issue" if rejection == "403" else "change"
    setup = write_config(tmp_path, [forge], llm_section(replay))

    [result] = _run_once(setup).results

    assert result.status == "failed"
    labels = forge.labels(kind, number)
    assert "coding agent failed" in labels and "coding agent done" not in labels
    final = forge.comments(kind, number)[-1][1]
    assert "coding-agent failed" in final and rejection in final and "not delivered" in final
    assert len(_changes(forge)) == changes_before, "no PR/MR was opened"
    assert not any(secret in final for secret in SECRETS)

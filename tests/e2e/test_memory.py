"""Memories across runs (SPEC 9.2): written after a run, read by the next run on the same
repository only, expired ones left out, listed and cleared by the CLI. The runs are the
service's cycle in-process (what `run --once` runs; its CLI is tested in test_run_once.py):
a `coding-agent` process start costs seconds of CPU and tells nothing about memories."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import pytest

from coding_agent.domain.tasks import TaskKey
from coding_agent.sandbox.replay_model import RecordedRequest, ReplaySandbox
from coding_agent.store.memories import MemoryStore
from coding_agent.store.state import StateStore

from ._steering import run_cycle
from .conftest import BOT, MAINTAINER, REPO, GitHubForge, llm_section, load_for_service, run_cli, write_config

OTHER_REPO = "acme/gadgets"
DAY = 86400.0
MEMORY_JSON = json.dumps(
    {
        "long_term_memory": "MEM-LONG: run `make test` before pushing.",
        "short_term_memory": "MEM-SHORT: added hello.txt.",
        "thread_memory": "MEM-THREAD: issue 1 asked for hello.txt; done.",
    }
)
SCRIPT: dict[str, Any] = {
    "conversations": [
        {
            "match": "First task",
            "replies": [
                {"tool": "workspace/create", "args": {"path": "hello.txt", "content": "hi\n"}, "comment": "Writing."},
                {"done": "Wrote hello.txt."},
                {"text": f"Here are my notes:\n```json\n{MEMORY_JSON}\n```"},
            ],
        }
    ],
    "replies": [{"done": "Nothing to do."}, {"text": '{"short_term_memory": "Looked around."}'}],
}


def first_request(model: ReplaySandbox, title: str) -> RecordedRequest:
    """The first request of the conversation whose task prompt holds `title`."""
    for request in model.requests:
        users = [m for m in request.body["messages"] if m["role"] == "user"]
        if users and title in users[0]["content"]:
            return request
    raise AssertionError(f"no request for {title!r}")


def first_prompt(model: ReplaySandbox, title: str) -> str:
    return "\n".join(str(m.get("content")) for m in first_request(model, title).body["messages"])


def _other_repo(forge: GitHubForge) -> None:
    state = forge.sandbox.state
    state.add_repo(OTHER_REPO)
    state.set_permission(OTHER_REPO, MAINTAINER, "admin")
    state.set_permission(OTHER_REPO, BOT, "write")


def _open(forge: GitHubForge, repo: str, title: str) -> int:
    state = forge.sandbox.state
    number = state.create_issue(repo, title, "Please do it.", author=MAINTAINER)
    state.add_label(repo, number, "coding agent", actor=MAINTAINER)
    return number


@pytest.mark.long
def test_memory_of_run_one_reaches_run_two_on_the_same_repository_only(github_forge: GitHubForge, tmp_path: Path) -> None:
    _other_repo(github_forge)
    with ReplaySandbox(SCRIPT) as model:
        setup = write_config(tmp_path, [github_forge], llm_section(model))
        _open(github_forge, REPO, "First task")
        assert run_cycle(load_for_service(setup)).errors == ()
        _open(github_forge, REPO, "Second task")
        _open(github_forge, OTHER_REPO, "Third task")
        assert run_cycle(load_for_service(setup)).errors == ()
        second, third = first_prompt(model, "Second task"), first_prompt(model, "Third task")
        first_memory_request = [r for r in model.requests if "update your notes" in str(r.body["messages"][-1]["content"])]

    assert len(first_memory_request) == 3, "one memory request after each done run"
    for written in ("MEM-LONG: run `make test`", "MEM-SHORT: added hello.txt.", "MEM-THREAD: issue 1 asked"):
        assert written in second, f"{written!r} is in the first request of run 2 on {REPO}"
        assert written not in third, f"{written!r} must not reach a run on {OTHER_REPO}"
    assert "Repositories the agent has worked in: acme/widgets." in third, "the organisation's memory is derived"

    listing = run_cli(setup, "memory", "list", REPO)
    assert listing.returncode == 0, listing.stderr
    assert "MEM-LONG: run `make test` before pushing." in listing.stdout
    assert "github:acme/widgets#1" in listing.stdout and "MEM-THREAD" in listing.stdout
    assert "MEM-LONG" not in run_cli(setup, "memory", "list", OTHER_REPO).stdout

    cleared = run_cli(setup, "memory", "clear", REPO)
    assert cleared.returncode == 0 and "cleared the memories of 1 repository" in cleared.stdout
    assert "no memories of acme/widgets" in run_cli(setup, "memory", "list", REPO).stdout
    assert "acme/gadgets" in run_cli(setup, "memory", "list").stdout, "the other repository's memories stay"
    assert run_cli(setup, "memory", "clear", "nobody/nothing").returncode == 1
    everything = run_cli(setup, "memory", "clear", "--yes")
    assert everything.returncode == 0 and "no memories recorded" in run_cli(setup, "memory", "list").stdout


def test_expired_thread_memory_and_inactive_repositories_are_left_out(github_forge: GitHubForge, tmp_path: Path) -> None:
    with ReplaySandbox(SCRIPT) as model:
        setup = write_config(tmp_path, [github_forge], llm_section(model))
        state = StateStore(f"sqlite:///{tmp_path / 'state.db'}")
        try:
            old = MemoryStore(state.engine, clock=lambda: time.time() - 8 * DAY)
            old.add_thread_memory(TaskKey.parse(f"github:{REPO}#90"), "old-run", "EXPIRED-THREAD-MEMORY")
            old.write_channel(TaskKey.parse("github:acme/dormant#1"), "DORMANT-LONG", "DORMANT-SHORT")
            fresh = MemoryStore(state.engine)
            fresh.add_thread_memory(TaskKey.parse(f"github:{REPO}#91"), "new-run", "FRESH-THREAD-MEMORY")
        finally:
            state.close()
        _open(github_forge, REPO, "Fourth task")
        assert run_cycle(load_for_service(setup)).errors == ()
        prompt = first_prompt(model, "Fourth task")

    assert "FRESH-THREAD-MEMORY" in prompt
    assert "EXPIRED-THREAD-MEMORY" not in prompt, "older than memory.thread_memory_days"
    assert "Recently active" not in prompt and "acme/dormant" in prompt, "known, but not active in 7 days"


def test_memory_disabled_costs_no_request_and_shows_nothing(github_forge: GitHubForge, tmp_path: Path) -> None:
    with ReplaySandbox(SCRIPT) as model:
        setup = write_config(tmp_path, [github_forge], llm_section(model), memory={"enabled": False})
        _open(github_forge, REPO, "First task")
        assert run_cycle(load_for_service(setup)).errors == ()
        requests = len(model.requests)
        _open(github_forge, REPO, "Second task")
        assert run_cycle(load_for_service(setup)).errors == ()
        second = first_prompt(model, "Second task")
    assert requests == 2, "two turns and no memory request"
    assert "MEM-" not in second and "What you remember" not in second

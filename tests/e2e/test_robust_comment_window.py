"""`comment_handling.max_comment_count` keeps the newest N comments (SPEC 9.1; issue 11
item 11): with fewer comments than the limit, every comment reaches the model.

The service's cycle runs in-process (what `run --once` runs) against the sandbox GitHub;
the check reads the first request the replay model received.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from coding_agent.sandbox.replay_model import ReplaySandbox

from ._steering import run_cycle
from .conftest import MAINTAINER, REPO, GitHubForge, llm_section, load_for_service, write_config


@pytest.mark.parametrize("count", [6, 9, 10, 13])
def test_the_newest_comments_up_to_the_limit_reach_the_model(
    github_forge: GitHubForge, replay: ReplaySandbox, count: int, tmp_path: Path
) -> None:
    state = github_forge.sandbox.state
    number = state.create_issue(REPO, "Windowed", "Keep my instructions.", author=MAINTAINER)
    for n in range(1, count + 1):
        state.add_comment(REPO, number, MAINTAINER, f"Instruction number {n:02d}.")
    state.add_label(REPO, number, "coding agent", actor=MAINTAINER)
    setup = write_config(tmp_path, [github_forge], llm_section(replay), comment_handling={"max_comment_count": 10})

    report = run_cycle(load_for_service(setup))

    assert report.errors == () and [r.status for r in report.results] == ["done"], report
    first_turn = replay.requests[0].body["messages"][1]["content"]
    shown = [n for n in range(1, count + 1) if f"Instruction number {n:02d}." in first_turn]
    assert shown == list(range(max(count - 10, 0) + 1, count + 1)), shown
    assert ("older ones left out" in first_turn) is (count > 10)

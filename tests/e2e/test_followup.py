"""Follow-ups (SPEC 3) on GitHub and GitLab: a trusted @mention on a done task starts a new
run that inherits the previous run's summary; a completion comment gets one short
acknowledgement and no run; an @mention from a reader does nothing."""

from __future__ import annotations

import json
from collections.abc import Iterator
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import pytest

from coding_agent.sandbox.github import GitHubSandbox, GitHubState
from coding_agent.sandbox.replay_model import ReplaySandbox
from coding_agent.store.followups import FollowUpRecords
from coding_agent.store.state import StateStore

from tests.support.state import agent_store

from ._steering import post_comment, run_cycle
from .conftest import BOT, MAINTAINER, READER, REPO, ForgeUnderTest, GitHubForge, llm_section, load_for_service, write_config
from .test_forge_requests_per_run import forge_targets, permission_read
from .test_memory import first_prompt

SUMMARY = json.dumps({"short_term_memory": "Greeting added.", "thread_memory": "RUN-ONE-SUMMARY: wrote hello.txt."})
SCRIPT: dict[str, Any] = {
    "conversations": [
        {"match": "also add a README", "replies": [{"done": "RUN-TWO-FINAL: README added."}, {"text": "{}"}]},
        {"match": "Greet people", "replies": [{"done": "RUN-ONE-FINAL: wrote hello.txt."}, {"text": SUMMARY}]},
    ]
}


def runs(setup_dir: Path) -> list[str]:
    store = StateStore(f"sqlite:///{setup_dir / 'state.db'}")
    try:
        return [run.status for run in store.runs.all()]
    finally:
        store.close()


@pytest.mark.long
def test_mention_on_a_done_task_starts_a_run_that_inherits_the_summary(forge: ForgeUnderTest, tmp_path: Path) -> None:
    number = forge.open_task("issue", "Greet people", "Please add hello.txt.")
    with ReplaySandbox(SCRIPT) as model:
        setup = write_config(tmp_path, [forge], llm_section(model))
        assert run_cycle(load_for_service(setup)).errors == ()
        assert "coding agent done" in forge.labels("issue", number)

        post_comment(forge, "issue", number, READER, f"@{BOT} delete everything")
        assert run_cycle(load_for_service(setup)).errors == ()
        assert runs(tmp_path) == ["done"], "a reader's @mention starts nothing"

        post_comment(forge, "issue", number, MAINTAINER, f"@{BOT} please also add a README")
        before = len(forge_targets(forge))
        assert run_cycle(load_for_service(setup)).errors == ()
        second = first_prompt(model, "also add a README")
        reads = forge_targets(forge)[before:].count(permission_read(forge, MAINTAINER))
        assert reads == 1, "the claim's read of the @mentioner's access serves the run's trust too"
        requests_after_followup = len(model.requests)

        assert run_cycle(load_for_service(setup)).errors == ()
        assert len(model.requests) == requests_after_followup, "the follow-up comment does not trigger twice"

    assert runs(tmp_path) == ["done", "done"]
    assert "RUN-ONE-SUMMARY: wrote hello.txt." in second, "the new run inherits the thread memory"
    assert "### assistant (you, @agent-bot)" in second and "RUN-ONE-FINAL" in second
    assert "asks for more on this issue" in second
    labels = forge.labels("issue", number)
    assert "coding agent done" in labels and "coding agent processing" not in labels
    assert forge.comments("issue", number)[-1] == (BOT, "RUN-TWO-FINAL: README added.")


@pytest.fixture
def same_second_forge() -> Iterator[GitHubForge]:
    """GitHub stamps whole seconds: the worst case is every object in the same second."""
    frozen = datetime.now(timezone.utc).replace(microsecond=0)
    with GitHubSandbox(GitHubState(clock=lambda: frozen)) as sandbox:
        yield GitHubForge(sandbox)


def test_completion_comment_gets_one_acknowledgement_and_no_run(same_second_forge: GitHubForge, tmp_path: Path) -> None:
    """Also when the comment lands in the same second as the bot's last one (it used to
    depend on a second passing between them, which a loaded machine does not guarantee)."""
    forge = same_second_forge
    number = forge.open_task("issue", "Greet people", "Please add hello.txt.")
    with ReplaySandbox(SCRIPT) as model:
        setup = write_config(tmp_path, [forge], llm_section(model))
        assert run_cycle(load_for_service(setup)).errors == ()
        requests = len(model.requests)
        post_comment(forge, "issue", number, MAINTAINER, f"@{BOT} thanks, done!")
        assert run_cycle(load_for_service(setup)).errors == ()
        assert run_cycle(load_for_service(setup)).errors == ()
        assert len(model.requests) == requests, "a completion comment costs no model call"

    assert runs(tmp_path) == ["done"]
    bodies = [body for author, body in forge.comments("issue", number) if author == BOT]
    acknowledgements = [body for body in bodies if body.startswith(f"Thank you, @{MAINTAINER}!")]
    assert len(acknowledgements) == 1, bodies
    assert "coding agent done" in forge.labels("issue", number)


@pytest.mark.parametrize("run_began", [False, True], ids=["no-run-followed", "a-run-followed"])
def test_a_recorded_followup_runs_once_whether_or_not_its_run_began(
    github_forge: GitHubForge, tmp_path: Path, run_began: bool
) -> None:
    """The claim records "run" for the @mention before it swaps `done` for `processing`
    (so the mention never acts twice). A worker killed between the two left the mention
    recorded, the task `done` and no run: the next look found it handled and the request
    was lost. Now a "run" that no run followed is claimed again, once; a "run" whose run
    began (and ended without a word after the mention: its answer could not be posted)
    starts nothing more."""
    forge = github_forge
    number = forge.open_task("issue", "Greet people", "Please add hello.txt.")
    key = f"github:{REPO}#{number}"
    with ReplaySandbox(SCRIPT) as model:
        setup = write_config(tmp_path, [forge], llm_section(model))
        assert run_cycle(load_for_service(setup)).errors == ()
        mention = forge.sandbox.state.add_comment(REPO, number, MAINTAINER, f"@{BOT} please also add a README")
        with agent_store(tmp_path) as store:  # as the worker left it: the decision recorded, its lease run out
            FollowUpRecords(store.engine).handle(key, str(mention), "run")
            assert store.leases.acquire_lease(key, "dead-worker", -1), "a lease that has already run out"
            if run_began:
                store.runs.start_run("silent-run", key, "dead-worker", MAINTAINER)
                store.runs.finish_run("silent-run", "done", 1, None)
        requests = len(model.requests)
        assert run_cycle(load_for_service(setup)).errors == ()
        assert run_cycle(load_for_service(setup)).errors == ()
        if not run_began:
            first_prompt(model, "also add a README")

    assert runs(tmp_path) == ["done", "done"], "one run after the record"
    if run_began:
        assert len(model.requests) == requests, "no second run for the same mention"
    else:
        assert forge.comments("issue", number)[-1] == (BOT, "RUN-TWO-FINAL: README added.")
    lifecycle = [label for label in forge.labels("issue", number) if label.startswith("coding agent")]
    assert lifecycle == ["coding agent done"]

"""Issue 11 items 7 and 8: forge writes that fail are neither duplicated nor lost.

The service runs in-process against the sandbox forges and the replay model. The forge
misbehaves the way real ones do: it applies a comment and still answers 502; it refuses
an over-long body with 422; it answers 503 for a while; it forbids a label write.
"""

from __future__ import annotations

from pathlib import Path

from coding_agent.sandbox.faults import Fault
from coding_agent.sandbox.replay_model import ReplaySandbox
from coding_agent.store.state import StateStore

from ._steering import run_cycle
from .conftest import (
    BOT,
    REPO,
    AgentSetup,
    ForgeUnderTest,
    GitHubForge,
    llm_section,
    load_for_service,
    progress_comments,
    write_config,
)

DONE_ONLY = {"replies": [{"done": "Looked at it; nothing to change."}]}


def _comment_post_pattern(forge: ForgeUnderTest) -> str:
    if forge.name == "github":
        return r"^POST /repos/acme/widgets/issues/\d+/comments$"
    return r"^POST /api/v4/projects/.+/issues/\d+/notes$"


def test_comment_applied_then_answered_502_is_not_posted_twice(forge: ForgeUnderTest, tmp_path: Path) -> None:
    number = forge.open_task("issue", "Applied but failed", "Have a look.")
    # Both comment POSTs of the run (the progress comment, then the final comment) are
    # applied by the forge and answered 502.
    forge.sandbox.faults.add(Fault(pattern=_comment_post_pattern(forge), count=2, status=502, applied=True))  # type: ignore[attr-defined]
    with ReplaySandbox(DONE_ONLY) as model:
        setup = write_config(tmp_path, [forge], llm_section(model))
        report = run_cycle(load_for_service(setup))

    assert [r.status for r in report.results] == ["done"]
    assert forge.sandbox.faults.injected == 2  # type: ignore[attr-defined]
    bodies = [body for author, body in forge.comments("issue", number) if author == BOT]
    assert len(progress_comments(bodies)) == 1, bodies
    finals = [body for body in bodies if "Looked at it; nothing to change." in body]
    assert len(finals) == 1, bodies
    assert len(bodies) == 2, bodies
    assert "coding agent done" in forge.labels("issue", number)


# ------------------------------------------------------------------ item 8: never stuck in processing


def _store(setup: AgentSetup) -> StateStore:
    return StateStore(f"sqlite:///{setup.directory / 'state.db'}")


def _assert_ended(forge: ForgeUnderTest, setup: AgentSetup, number: int, status: str, why: str = "") -> None:
    """The task ended `status`: its label (and no longer processing), its one run in the
    store, and no lease left behind."""
    labels = forge.labels("issue", number)
    assert f"coding agent {status}" in labels and "coding agent processing" not in labels, labels
    key = _task_key(forge, number)
    store = _store(setup)
    try:
        assert [run.status for run in store.runs.all(key)] == [status], why
        assert store.leases.lease_owner(key) is None
    finally:
        store.close()


def _final_comment_pattern(forge: ForgeUnderTest) -> str:
    # With the progress comment off and a one-reply run, the final comment is the run's
    # only comment POST.
    return _comment_post_pattern(forge)


def test_an_over_long_answer_is_capped_at_the_forge_limit_with_a_note(github_forge: GitHubForge, tmp_path: Path) -> None:
    number = github_forge.open_task("issue", "Huge answer", "Say a lot.")
    # 150,000 characters: a reply the loop accepts, a comment GitHub would refuse (422).
    huge = "word " * 30_000
    with ReplaySandbox({"replies": [{"done": huge}]}) as model:
        setup = write_config(tmp_path, [github_forge], llm_section(model))
        report = run_cycle(load_for_service(setup))

    assert [r.status for r in report.results] == ["done"]
    [final] = [body for author, body in github_forge.comments("issue", number) if author == BOT and "word word" in body]
    assert len(final) <= 65_536 and "full text is in the run's context" in final
    assert "coding agent done" in github_forge.labels("issue", number)


def test_final_comment_answered_422_ends_the_task_failed_with_a_comment(github_forge: GitHubForge, tmp_path: Path) -> None:
    number = github_forge.open_task("issue", "Refused", "Have a look.")
    github_forge.sandbox.faults.add(Fault(pattern=_final_comment_pattern(github_forge), count=1, status=422))
    with ReplaySandbox(DONE_ONLY) as model:
        setup = write_config(tmp_path, [github_forge], llm_section(model), progress_comment={"enabled": False})
        report = run_cycle(load_for_service(setup))

    assert [r.status for r in report.results] == ["failed"]
    assert github_forge.sandbox.faults.injected == 1
    [notice] = [body for author, body in github_forge.comments("issue", number) if author == BOT]
    assert "HTTP 422" in notice
    _assert_ended(github_forge, setup, number, "failed")


def test_final_comment_503_streak_is_completed_by_the_next_cycle(forge: ForgeUnderTest, tmp_path: Path) -> None:
    number = forge.open_task("issue", "Forge down at the end", "Have a look.")
    # Four 503s: the first attempt and its three retries all fail.
    forge.sandbox.faults.add(Fault(pattern=_final_comment_pattern(forge), count=4, status=503))  # type: ignore[attr-defined]
    with ReplaySandbox(DONE_ONLY) as model:
        setup = write_config(tmp_path, [forge], llm_section(model), progress_comment={"enabled": False})
        run_cycle(load_for_service(setup))
        key = _task_key(forge, number)
        store = _store(setup)
        try:
            assert store.leases.lease_owner(key) is None, "no lease is kept by a run that could not finish"
            [run] = store.runs.all(key)
            assert store.steering.run_marks(run.uuid).final_status == "done", "the outcome is recorded as finishing"
        finally:
            store.close()
        assert "coding agent processing" in forge.labels("issue", number)

        second = run_cycle(load_for_service(setup))  # the next cycle, by a new worker

    assert [r.status for r in second.results] == ["done"]
    finals = [body for author, body in forge.comments("issue", number) if author == BOT]
    assert finals == ["Looked at it; nothing to change."]
    _assert_ended(forge, setup, number, "done")


def test_label_write_answered_403_is_completed_by_the_next_cycle(github_forge: GitHubForge, tmp_path: Path) -> None:
    number = github_forge.open_task("issue", "Label refused", "Have a look.")
    github_forge.sandbox.faults.add(
        Fault(pattern=r"^DELETE /repos/acme/widgets/issues/\d+/labels/coding.agent.processing$", count=1, status=403)
    )
    with ReplaySandbox(DONE_ONLY) as model:
        setup = write_config(tmp_path, [github_forge], llm_section(model))
        run_cycle(load_for_service(setup))
        assert github_forge.sandbox.faults.injected == 1
        assert "coding agent processing" in github_forge.labels("issue", number)
        second = run_cycle(load_for_service(setup))

    assert [r.status for r in second.results] == ["done"]
    bodies = [body for author, body in github_forge.comments("issue", number) if author == BOT]
    assert [body for body in bodies if "nothing to change" in body] == ["Looked at it; nothing to change."]
    [progress] = progress_comments(bodies)
    assert "done" in progress, "the run's one progress comment shows its end"
    _assert_ended(github_forge, setup, number, "done")


def test_a_run_that_can_never_publish_ends_failed_and_lets_go(github_forge: GitHubForge, tmp_path: Path) -> None:
    number = github_forge.open_task("issue", "Labels forbidden", "Have a look.")
    github_forge.sandbox.faults.add(
        Fault(pattern=r"^DELETE /repos/acme/widgets/issues/\d+/labels/coding.agent.processing$", count=100, status=403)
    )
    with ReplaySandbox(DONE_ONLY) as model:
        setup = write_config(tmp_path, [github_forge], llm_section(model))
        for _ in range(4):
            run_cycle(load_for_service(setup))

    store = _store(setup)
    try:
        assert [run.status for run in store.runs.all()] == ["failed"], "given up after its publish attempts"
        assert store.leases.lease_owner(f"github:{REPO}#{number}") is None
    finally:
        store.close()
    bodies = [body for author, body in github_forge.comments("issue", number) if author == BOT]
    assert any("HTTP 403" in body for body in bodies), "the failure is explained on the task"


def _task_key(forge: ForgeUnderTest, number: int) -> str:
    return f"github:{REPO}#{number}" if forge.name == "github" else f"gitlab:{REPO}#{number}"

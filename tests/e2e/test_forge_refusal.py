"""Issue 11 item 14: a refused trigger is explained once per task, whatever happens later.

A user without write access labels a task: one comment says why nothing happens. Later
comments and edits (which change the task's `updated_at`) must not bring a second
explanation, while a maintainer's own trigger afterwards still starts the agent.
"""

from __future__ import annotations

from datetime import datetime, timezone
from pathlib import Path

from coding_agent.sandbox.replay_model import ReplaySandbox
from tests.support.waiting import wait_for

from ._steering import post_comment, run_cycle
from .conftest import BOT, MAINTAINER, READER, ForgeUnderTest, llm_section, load_for_service, write_config

DONE_ONLY = {"replies": [{"done": "Done as the maintainer asked."}]}


def _relabel(forge: ForgeUnderTest, number: int, actor: str) -> None:
    state = forge.sandbox.state  # type: ignore[attr-defined]
    state.remove_label("acme/widgets", number, "coding agent", actor=actor)
    state.add_label("acme/widgets", number, "coding agent", actor=actor)


def test_refusal_is_commented_once_whatever_happens_later(forge: ForgeUnderTest, tmp_path: Path) -> None:
    number = forge.open_task("issue", "Drive-by", "Do something.", labelled_by=READER)
    with ReplaySandbox(DONE_ONLY) as model:
        setup = write_config(tmp_path, [forge], llm_section(model))
        run_cycle(load_for_service(setup))
        post_comment(forge, "issue", number, READER, "Please? It is important.")
        run_cycle(load_for_service(setup))
        _relabel(forge, number, READER)  # the reader tries again
        post_comment(forge, "issue", number, READER, "Hello?")
        run_cycle(load_for_service(setup))
        refusals = [body for author, body in forge.comments("issue", number) if author == BOT]
        assert len(refusals) == 1, refusals
        assert f"@{READER}" in refusals[0] and "write access" in refusals[0]
        assert model.requests == [], "no model call for an untrusted trigger"

        # Forges stamp `updated_at` to the second: let it tick, so the maintainer's label
        # is a change the agent can see (as it would be in real time).
        last_look = datetime.now(timezone.utc).replace(microsecond=0)
        wait_for(lambda: datetime.now(timezone.utc).replace(microsecond=0) > last_look, 5, "the next second")
        _relabel(forge, number, MAINTAINER)  # a maintainer takes it up
        report = run_cycle(load_for_service(setup))

    assert [r.status for r in report.results] == ["done"]
    bot_comments = [body for author, body in forge.comments("issue", number) if author == BOT]
    assert len([body for body in bot_comments if "write access" in body]) == 1
    assert "coding agent done" in forge.labels("issue", number)

"""Issue 11 items 7 and 8: forge writes that fail are neither duplicated nor lost.

The service runs in-process against the sandbox forges and the replay model. The forge
misbehaves the way real ones do: it applies a comment and still answers 502; it refuses
an over-long body with 422; it answers 503 for a while; it forbids a label write.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

from coding_agent.runtime.service import AgentService, CycleReport
from coding_agent.testing.faults import Fault
from coding_agent.testing.replay_model import ReplaySandbox

from .conftest import BOT, ForgeUnderTest, llm_section, load_for_service, progress_comments, write_config

DONE_ONLY = {"replies": [{"done": "Looked at it; nothing to change."}]}


def _run_cycle(config: object) -> CycleReport:
    async def once() -> CycleReport:
        service = AgentService(config)  # type: ignore[arg-type]
        try:
            return await service.run_cycle()
        finally:
            await service.aclose()

    return asyncio.run(once())


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
        report = _run_cycle(load_for_service(setup))

    assert [r.status for r in report.results] == ["done"]
    assert forge.sandbox.faults.injected == 2  # type: ignore[attr-defined]
    bodies = [body for author, body in forge.comments("issue", number) if author == BOT]
    assert len(progress_comments(bodies)) == 1, bodies
    finals = [body for body in bodies if "Looked at it; nothing to change." in body]
    assert len(finals) == 1, bodies
    assert len(bodies) == 2, bodies
    assert "coding agent done" in forge.labels("issue", number)

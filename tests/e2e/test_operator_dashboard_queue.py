"""A task the producer queued while no worker slot is free is on the dashboard before its
run starts (SPEC 11.3): listed as waiting, with its place in the queue and the title the
poll read from the forge."""

from __future__ import annotations

import asyncio
from pathlib import Path

from coding_agent.redaction import Redactor
from coding_agent.runtime.service import AgentService
from coding_agent.sandbox.replay_model import ReplaySandbox
from coding_agent.web.views import task_list

from ._steering import steering_config
from .conftest import HELLO_SCRIPT, REPO, GitHubForge, load_for_service


def test_a_queued_task_is_listed_as_waiting_with_its_title(github_forge: GitHubForge, tmp_path: Path) -> None:
    first = github_forge.open_task("issue", "Add a greeting file", "Please add hello.txt.")
    second = github_forge.open_task("issue", "Écrire <b>README</b> ✓", "Please add README.")
    with ReplaySandbox(HELLO_SCRIPT) as model:
        config = load_for_service(steering_config(tmp_path, [github_forge], model))

        async def produce_only() -> list[dict]:  # type: ignore[type-arg]
            service = AgentService(config)
            try:
                await service.producer.cycle(await service.queue())  # no worker takes them
                return await asyncio.to_thread(task_list, service.store, Redactor([]))
            finally:
                await service.aclose()

        rows = asyncio.run(produce_only())
    by_key = {row["task"]: row for row in rows}
    waiting = [by_key[f"github:{REPO}#{number}"] for number in (first, second)]
    assert [row["state"] for row in waiting] == ["waiting", "waiting"]
    assert sorted(row["queue_position"] for row in waiting) == [1, 2]
    assert [row["title"] for row in waiting] == ["Add a greeting file", "Écrire <b>README</b> ✓"]
    assert all(row["url"] and row["url"].startswith("http") for row in waiting)
    assert model.requests == [], "nothing ran"

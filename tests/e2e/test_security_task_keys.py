"""Dot segments in a task key (SPEC 15, "Make a worker act out of scope"), end to end: a
real `worker` process on RabbitMQ and PostgreSQL, and the producer with its webhooks.

Scope `github.owner: acme`, no `github.repos`. A message published by hand to the broker
names `github:acme/../evil/x#N`, and a correctly signed webhook names the repository
`acme/../evil/x`: both read as `acme` to a scope check of the first segment, and the
HTTP client resolves `..` in the forge's URLs to `/repos/evil/x/...`. Neither reaches
`evil/x` (no request at all: no claim, label, comment or PR); each is refused with one log
line naming it; a task in scope, labelled by webhook meanwhile, is worked by the worker."""

from __future__ import annotations

import asyncio
import logging
import re
import subprocess
from pathlib import Path
from typing import Any

import httpx
import pytest

from coding_agent.runtime.service import AgentService
from coding_agent.sandbox.replay_model import ReplaySandbox
from coding_agent.store.state import StateStore
from coding_agent.web.server import bind_socket, serving_http
from tests.support.github_webhooks import GitHubWebhooks
from tests.support.waiting import wait_for, wait_until

from ._steering import distributed_config, spawn_cli
from .conftest import BOT, HELLO_SCRIPT, MAINTAINER, REPO, GitHubForge, load_for_service
from .test_runtime_queue import _publish_by_hand

SECRET = "whsec-" + "taskkeys0123456789abcdef"
EVIL = "evil/x"
DONE = "coding agent done"


def _deliver(url: str, event: str, payload: dict[str, Any]) -> httpx.Response:
    body = GitHubWebhooks.body(payload)
    return httpx.post(f"{url}/webhooks/github", content=body, headers=GitHubWebhooks.headers(event, body, SECRET), timeout=30)


async def _produce(config: Any, forge: GitHubForge, worker: subprocess.Popen[str], deliver: Any, legit: list[int]) -> None:
    """The producer role with its webhooks, in this process: `deliver(service, url)` sends
    the deliveries; it runs until the in-scope task is done or the worker exits."""
    service = AgentService(config)
    stop = asyncio.Event()
    try:
        async with serving_http(config, service, bind_socket("127.0.0.1", 0)) as url:
            assert url is not None
            producing = asyncio.create_task(service.produce(stop))
            try:
                await asyncio.to_thread(deliver, service, url)
                await wait_until(
                    lambda: DONE in forge.labels("issue", legit[0]) or producing.done() or worker.poll() is not None,
                    240,
                    "the in-scope task done by the worker",
                )
            finally:
                stop.set()
                await producing
    finally:
        await service.aclose()


def test_a_dot_segment_key_by_the_queue_or_a_webhook_reaches_no_other_repository(
    github_forge: GitHubForge, tmp_path: Path, distributed: tuple[str, str], caplog: pytest.LogCaptureFixture
) -> None:
    url, name = distributed
    state = github_forge.sandbox.state
    state.add_repo(EVIL)
    state.set_permission(EVIL, MAINTAINER, "admin")
    state.set_permission(EVIL, BOT, "write")  # the token reaches it: only the scope stands in the way
    foreign = state.create_issue(EVIL, "Foreign task", "Please add hello.txt.", author=MAINTAINER)
    state.add_label(EVIL, foreign, "coding agent", actor=MAINTAINER)
    labels_before = list(state.issue(EVIL, foreign).labels)
    hostile_key = f"github:acme/../{EVIL}#{foreign}"
    hostile_name = f"acme/../{EVIL}"
    asyncio.run(_publish_by_hand(name, [{"key": hostile_key, "reason": "new"}]))

    hooks = GitHubWebhooks(state, github_forge.url)
    legit: list[int] = []
    answers: list[int] = []

    def deliver(service: AgentService, url: str) -> None:
        wait_for(lambda: service.producer.cycles >= 1, 60, "the first poll at start")
        forged = hooks.issues(EVIL, foreign, "labeled", MAINTAINER, label="coding agent")
        forged["repository"] = {**forged["repository"], "full_name": hostile_name}
        answers.append(_deliver(url, "issues", forged).status_code)
        legit.append(github_forge.open_task("issue", "Legit task", "Please add hello.txt."))
        answers.append(_deliver(url, "issues", hooks.issues(REPO, legit[0], "labeled", MAINTAINER, label="coding agent")).status_code)

    with ReplaySandbox(HELLO_SCRIPT) as model:
        setup = distributed_config(
            tmp_path,
            github_forge,
            model,
            url,
            name,
            workers=1,
            scheduling={"interval_seconds": 3600},
            webhooks={"github_secret": SECRET},
        )
        worker_log = tmp_path / "worker.stderr"
        with worker_log.open("w") as sink:
            worker = spawn_cli(setup.config_path, "worker", output=sink.fileno())
        try:
            with caplog.at_level(logging.INFO):
                asyncio.run(asyncio.wait_for(_produce(load_for_service(setup), github_forge, worker, deliver, legit), 300))
        finally:
            worker.terminate()
            worker.wait(120)
        asked = model.requests

    assert worker.returncode == 0, worker_log.read_text()[-3000:]
    assert answers == [200, 202], "the forged delivery is answered, and enqueues nothing"
    store = StateStore(url)
    try:
        runs = [(run.task_key, run.status) for run in store.runs.all()]
    finally:
        store.close()
    assert runs == [(f"github:{REPO}#{legit[0]}", "done")], runs
    assert asked and all("Foreign task" not in str(request.body) for request in asked)
    touched = [f"{r.method} {r.path}" for r in state.requests() if "/evil" in r.path or "%2e" in r.path.lower()]
    assert touched == [], "nothing in evil/x is touched: no claim, label, comment or PR"
    assert list(state.issue(EVIL, foreign).labels) == labels_before
    assert state.comments(EVIL, foreign) == [] and state.pulls(EVIL) == []

    logged = worker_log.read_text() + "".join(path.read_text() for path in setup.logs.glob("*.log*"))
    worker_lines = [line for line in logged.splitlines() if hostile_key in line]
    assert len(worker_lines) == 1, (worker_lines, logged[-3000:])
    assert re.search(r"not a canonical task key", worker_lines[0]), worker_lines[0]
    producer_lines = [r.getMessage() for r in caplog.records if repr(hostile_name) in r.getMessage()]
    assert len(producer_lines) == 1, producer_lines

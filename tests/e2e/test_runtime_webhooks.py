"""Webhooks end to end (SPEC 11.2): `serve` with a webhook secret, real HTTP to its
uvicorn server. A labelled task reaches its first model request with no poll after the
first; an unassign delivered by webhook stops a running task at its next checkpoint
although `min_check_interval_seconds` would not have re-read the assignees for an hour,
also when the run is in a `worker` process and the webhook reaches the producer."""

from __future__ import annotations

import asyncio
import subprocess
from pathlib import Path
from typing import Any

import httpx
import pytest

from coding_agent.agent.steering.interrupts import REQUEST_READ_SECONDS
from coding_agent.runtime.service import AgentService
from coding_agent.sandbox.replay_model import ReplaySandbox
from coding_agent.store.state import StateStore
from coding_agent.web.server import bind_socket, serving_http
from tests.support.github_webhooks import GitHubWebhooks
from tests.support.waiting import wait_for, wait_until

from ._steering import distributed_config, new_comment_messages, spawn_cli, steering_config
from .conftest import BOT, HELLO_SCRIPT, MAINTAINER, REPO, GitHubForge, load_for_service

SECRET = "whsec-" + "e2e0123456789abcdef"


def _deliver(url: str, forge: GitHubForge, event: str, payload: dict[str, Any]) -> None:
    body = GitHubWebhooks.body(payload)
    response = httpx.post(f"{url}/webhooks/github", content=body, headers=GitHubWebhooks.headers(event, body, SECRET))
    assert response.status_code == 202, response.text


async def _serve_with_webhooks(config: Any, until: Any, ready: Any = None) -> AgentService:
    """Run `serve` plus its webhooks until `until(service)` is true; returns the service."""
    service = AgentService(config)
    stop = asyncio.Event()
    try:
        async with serving_http(config, service, bind_socket("127.0.0.1", 0)) as url:
            assert url is not None
            serving = asyncio.create_task(service.serve(stop))
            try:
                if ready is not None:
                    await asyncio.to_thread(ready, service, url)
                await wait_until(lambda: until(service) or serving.done(), 180, "the awaited outcome of serve")
            finally:
                stop.set()
                await serving
    finally:
        await service.aclose()
    return service


def test_a_webhook_starts_a_task_without_a_poll(github_forge: GitHubForge, tmp_path: Path) -> None:
    hooks = GitHubWebhooks(github_forge.sandbox.state, github_forge.url)
    numbers: list[int] = []
    with ReplaySandbox(HELLO_SCRIPT) as model:
        setup = steering_config(
            tmp_path, [github_forge], model, scheduling={"interval_seconds": 3600}, webhooks={"github_secret": SECRET}
        )

        def label_and_deliver(service: AgentService, url: str) -> None:
            wait_for(lambda: service.producer.cycles >= 1, 60, "the first poll at start")
            numbers.append(github_forge.open_task("issue", "Add a greeting file", "Please add hello.txt."))
            _deliver(url, github_forge, "issues", hooks.issues(REPO, numbers[0], "labeled", MAINTAINER, label="coding agent"))
            wait_for(lambda: model.requests, 60, "the task's first model request")

        service = asyncio.run(
            asyncio.wait_for(
                _serve_with_webhooks(
                    load_for_service(setup),
                    lambda s: bool(numbers) and "coding agent done" in github_forge.labels("issue", numbers[0]),
                    label_and_deliver,
                ),
                240,
            )
        )

    assert service.producer.cycles == 1, "no poll found it: the webhook did"
    assert "coding agent done" in github_forge.labels("issue", numbers[0])


def test_an_unassign_by_webhook_reaches_the_running_task_at_its_next_checkpoint(
    github_forge: GitHubForge, tmp_path: Path
) -> None:
    state = github_forge.sandbox.state
    hooks = GitHubWebhooks(state, github_forge.url)
    number = github_forge.open_task("issue", "Add a greeting file", "Please add hello.txt.")
    state.assign(REPO, number, BOT, actor=MAINTAINER)
    urls: list[str] = []

    def unassign(_: dict[str, Any]) -> None:
        state.unassign(REPO, number, BOT, actor=MAINTAINER)
        _deliver(urls[0], github_forge, "issues", hooks.issues(REPO, number, "unassigned", MAINTAINER))

    replies = [{**HELLO_SCRIPT["replies"][0], "before": {"unassign": {}}}, *HELLO_SCRIPT["replies"][1:]]
    with ReplaySandbox({"replies": replies}, actions={"unassign": unassign}) as model:
        setup = steering_config(
            tmp_path,
            [github_forge],
            model,
            scheduling={"interval_seconds": 3600},
            webhooks={"github_secret": SECRET},
            task_stop={"enabled": True, "check_interval": 1, "min_check_interval_seconds": 3600},
        )
        asyncio.run(
            asyncio.wait_for(
                _serve_with_webhooks(
                    load_for_service(setup),
                    lambda s: "coding agent stopped" in github_forge.labels("issue", number)
                    or "coding agent done" in github_forge.labels("issue", number),
                    lambda service, url: urls.append(url),
                ),
                240,
            )
        )
        requests = model.requests

    lifecycle = [label for label in github_forge.labels("issue", number) if label.startswith("coding agent")]
    assert lifecycle == ["coding agent stopped"]
    assert len(requests) == 1, "stopped right after the reply during which the unassign arrived"
    assert not any((path / "hello.txt").exists() for path in (tmp_path / "workspaces").iterdir())


@pytest.mark.parametrize("change", ["unassign", "comment"])
def test_a_webhook_to_the_producer_steers_the_run_in_a_worker_process(
    github_forge: GitHubForge, tmp_path: Path, distributed: tuple[str, str], change: str
) -> None:
    """The run is in a `worker` process, the webhook reaches the producer (this process):
    the producer has no run to nudge, so the nudge goes through the state store, and the
    worker's run re-reads the assignees (stops) or the comments (sends them) at its next
    checkpoint, with `min_check_interval_seconds` an hour and polling an hour."""
    url, name = distributed
    state = github_forge.sandbox.state
    hooks = GitHubWebhooks(state, github_forge.url)
    number = github_forge.open_task("issue", "Add a greeting file", "Please add hello.txt.")
    state.assign(REPO, number, BOT, actor=MAINTAINER)
    urls: list[str] = []

    def act(_: dict[str, Any]) -> None:
        if change == "unassign":
            state.unassign(REPO, number, BOT, actor=MAINTAINER)
            _deliver(urls[0], github_forge, "issues", hooks.issues(REPO, number, "unassigned", MAINTAINER))
        else:
            comment = state.add_comment(REPO, number, MAINTAINER, "Please also add a README.")
            _deliver(urls[0], github_forge, "issue_comment", hooks.issue_comment(REPO, number, comment, MAINTAINER))

    replies = [{**HELLO_SCRIPT["replies"][0], "before": {"act": {}}}, *HELLO_SCRIPT["replies"][1:]]
    # Each reply takes longer than the run reuses a state store answer, as a real model's
    # does: the checkpoint after it reads the store again (the nudge is there by then).
    script = {"replies": replies, "latency_seconds": 2 * REQUEST_READ_SECONDS}
    with ReplaySandbox(script, actions={"act": act}) as model:
        setup = distributed_config(
            tmp_path,
            github_forge,
            model,
            url,
            name,
            scheduling={"interval_seconds": 3600},
            webhooks={"github_secret": SECRET},
            task_stop={"enabled": True, "check_interval": 1, "min_check_interval_seconds": 3600},
        )
        config = load_for_service(setup)
        with (tmp_path / "worker.log").open("w") as worker_log:
            worker = spawn_cli(setup.config_path, "worker", output=worker_log.fileno())
            try:
                producer = asyncio.run(asyncio.wait_for(_produce_until_ended(config, github_forge, number, worker, urls), 240))
            finally:
                worker.terminate()
                worker.wait(120)
        requests = model.requests

    assert worker.returncode == 0, (tmp_path / "worker.log").read_text()[-3000:]
    store = StateStore(url)
    try:
        runs = store.runs.all()
    finally:
        store.close()
    assert len(runs) == 1 and runs[0].owner != producer.owner, "the worker process ran it"
    lifecycle = [label for label in github_forge.labels("issue", number) if label.startswith("coding agent")]
    if change == "unassign":
        assert lifecycle == ["coding agent stopped"]
        assert len(requests) == 1, "stopped right after the reply during which the unassign arrived"
    else:
        assert lifecycle == ["coding agent done"]
        assert len(requests) == 2
        assert [len(new_comment_messages(request)) for request in requests] == [0, 1], "sent at the next step"
        assert "Please also add a README." in new_comment_messages(requests[1])[0]


async def _produce_until_ended(
    config: Any, forge: GitHubForge, number: int, worker: subprocess.Popen[str], urls: list[str]
) -> AgentService:
    """The producer role with its webhooks, in this process, until the task has ended."""
    service = AgentService(config)
    stop = asyncio.Event()
    ended = ("coding agent stopped", "coding agent done", "coding agent failed")
    try:
        async with serving_http(config, service, bind_socket("127.0.0.1", 0)) as url:
            assert url is not None
            urls.append(url)
            producing = asyncio.create_task(service.produce(stop))
            try:
                await wait_until(
                    lambda: any(label in forge.labels("issue", number) for label in ended)
                    or producing.done()
                    or worker.poll() is not None,
                    180,
                    "the task to end in the worker process",
                )
            finally:
                stop.set()
                await producing
    finally:
        await service.aclose()
    return service

"""A long-running `serve` or `worker` starts afresh after `scheduling.restart_after_runs`
runs, at a moment no run is in progress: the same process (pid) with a new image, the
webhooks' listening socket kept (a delivery made meanwhile waits in its backlog), and
every task done exactly once across the restarts."""

from __future__ import annotations

import asyncio
import os
import re
import socket
import threading
from pathlib import Path

import httpx
import pytest

from coding_agent.runtime.service import AgentService
from coding_agent.sandbox.replay_model import ReplaySandbox
from coding_agent.store.state import StateStore
from coding_agent.web.server import HANDED_DOWN_SOCKET, bind_socket, serving_http
from tests.support.github_webhooks import GitHubWebhooks
from tests.support.waiting import wait_for

from ._steering import distributed_config, start_serve, steering_config, stop_serve
from .conftest import HELLO_SCRIPT, MAINTAINER, REPO, GitHubForge, load_for_service
from .test_runtime_queue import _finals, _work_queued_tasks

SECRET = "whsec-" + "afresh0123456789abcdefgh"
RESTART_AFTER_RUNS = 2
STARTED_AFRESH = "starting afresh (scheduling.restart_after_runs)"


def _label_by_webhook(url: str, forge: GitHubForge, number: int) -> int:
    """POSTs the signed `labeled` delivery; its HTTP status."""
    hooks = GitHubWebhooks(forge.sandbox.state, forge.url)
    body = GitHubWebhooks.body(hooks.issues(REPO, number, "labeled", MAINTAINER, label="coding agent"))
    response = httpx.post(f"{url}/webhooks/github", content=body, headers=GitHubWebhooks.headers("issues", body, SECRET), timeout=60)
    return response.status_code


def _read_until_closed(url: str, received: list[str]) -> None:
    """A live page's update stream, read until the server ends it."""
    with httpx.stream("GET", f"{url}/events", timeout=httpx.Timeout(10, read=120)) as response:
        for line in response.iter_lines():
            received.append(line)
    received.append("<closed>")


def _done(forge: GitHubForge, number: int) -> bool:
    return "coding agent done" in forge.labels("issue", number)


def _images(owners: set[str], pid: int) -> set[str]:
    """The process images (lease owner ids: host-pid-random) among `owners` of process `pid`."""
    return {owner for owner in owners if re.search(rf"-{pid}-[0-9a-f]{{8}}$", owner)}


def test_serve_starts_afresh_after_its_runs_keeping_its_pid_its_socket_and_every_task(
    github_forge: GitHubForge, tmp_path: Path
) -> None:
    numbers = [github_forge.open_task("issue", f"Task {n}", f"Please add hello.txt ({n}).") for n in range(4)]
    stderr = tmp_path / "serve.stderr"
    with ReplaySandbox(HELLO_SCRIPT) as model:
        setup = steering_config(
            tmp_path,
            [github_forge],
            model,
            scheduling={"interval_seconds": 3600, "restart_after_runs": RESTART_AFTER_RUNS},
            dashboard={"bind": "127.0.0.1:0"},
            webhooks={"github_secret": SECRET},
        )
        log = setup.logs / "coding-agent.log"
        process, url = start_serve(setup.config_path, stderr)
        page: list[str] = []
        reader = threading.Thread(target=_read_until_closed, args=(url, page), daemon=True)
        try:
            reader.start()  # a dashboard page left open: it must not hold the restart up
            wait_for(lambda: any(line.startswith("data: ") for line in page), 60, "the page's first update")
            statuses = [_label_by_webhook(url, github_forge, number) for number in numbers[:2]]
            wait_for(lambda: all(_done(github_forge, n) for n in numbers[:2]), 120, "the first two tasks to end")
            # Delivered as the restart begins: answered by one image or the other, never refused.
            statuses.append(_label_by_webhook(url, github_forge, numbers[2]))
            wait_for(lambda: log.read_text().count(STARTED_AFRESH) >= 1, 120, "serve to start afresh")
            wait_for(lambda: len(re.findall(r"dashboard at (http://\S+)", stderr.read_text())) >= 2, 120, "the new image to serve")
            statuses.append(_label_by_webhook(url, github_forge, numbers[3]))
            wait_for(lambda: all(_done(github_forge, n) for n in numbers), 120, "every task to end")
            alive_throughout = process.poll() is None
            reader.join(60)
        finally:
            stop_serve(process)
        store = StateStore(f"sqlite:///{setup.directory / 'state.db'}")
        try:
            runs = store.runs.all()
        finally:
            store.close()

    assert alive_throughout, "the process never exited: the new image runs under the same pid"
    assert page[-1] == "<closed>", "the open page's stream was ended by the restart (its browser reconnects)"
    assert statuses == [202] * 4
    served = re.findall(r"dashboard at (http://\S+)", stderr.read_text())
    assert len(served) >= 2 and set(served) == {url}, f"the new image listens on the socket handed down (port 0): {served}"
    assert sorted(run.task_key for run in runs) == sorted(f"github:{REPO}#{n}" for n in numbers), "one run per task"
    assert {run.status for run in runs} == {"done"}
    assert len(_images({run.owner for run in runs}, process.pid)) >= 2, "runs by two images of one process"
    for number in numbers:
        assert len(_finals(github_forge, number)) == 1, number
    text = log.read_text()
    assert "Traceback" not in text and " ERROR " not in text, text[-3000:]
    assert process.returncode == 0, stderr.read_text()[-3000:]


def test_a_worker_starts_afresh_between_runs_and_the_queue_s_tasks_are_each_done_once(
    github_forge: GitHubForge, tmp_path: Path, distributed: tuple[str, str]
) -> None:
    url, name = distributed
    with ReplaySandbox(HELLO_SCRIPT) as model:
        setup = distributed_config(
            tmp_path, github_forge, model, url, name, scheduling={"restart_after_runs": RESTART_AFTER_RUNS}
        )
        numbers, runs, [worker], errors = _work_queued_tasks(github_forge, setup, url, 5, processes=1)

    assert worker.returncode == 0, errors
    assert sorted(run.task_key for run in runs) == sorted(f"github:{REPO}#{n}" for n in numbers), "one run per task"
    assert {run.status for run in runs} == {"done"}
    assert len(_images({run.owner for run in runs}, worker.pid)) >= 3, "a new image every two runs"
    for number in numbers:
        assert len(_finals(github_forge, number)) == 1, number
    text = (setup.logs / "coding-agent.log").read_text()
    assert text.count(STARTED_AFRESH) >= 2 and "Traceback" not in text, text[-3000:]


def _inode(fd: int) -> int | None:
    """What `fd` is open on now (None: closed); a closed number may be reused at once."""
    try:
        return os.fstat(fd).st_ino
    except OSError:
        return None


async def _served_url(config: object) -> str | None:
    service = AgentService(config)  # type: ignore[arg-type]
    try:
        async with serving_http(service.config, service) as url:
            return url
    finally:
        await service.aclose()


@pytest.mark.parametrize("whose", ["another process's", "this process's, listening elsewhere"])
def test_a_named_socket_is_taken_only_from_this_process_s_previous_image_and_where_configured(
    github_forge: GitHubForge, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, whose: str
) -> None:
    """The environment names a listening socket, as a restart would: one named for
    another pid (set by hand, or inherited from a parent) is neither used nor closed; this
    pid's own, listening elsewhere than `dashboard.bind` (the config changed), is closed;
    either way the configured address is bound."""
    other = bind_socket("127.0.0.1", 0)
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    inode = _inode(other.fileno())
    pid = os.getpid() if whose.startswith("this") else os.getppid()
    monkeypatch.setenv(HANDED_DOWN_SOCKET, f"{pid}:{other.fileno()}")
    with ReplaySandbox(HELLO_SCRIPT) as model:
        setup = steering_config(
            tmp_path, [github_forge], model, dashboard={"bind": f"127.0.0.1:{port}"}, webhooks={"github_secret": SECRET}
        )
        kept = True
        try:
            url = asyncio.run(_served_url(load_for_service(setup)))
            kept = _inode(other.fileno()) == inode
        finally:
            if kept:
                other.close()
            else:
                other.detach()  # closed already; its number may be another file's now

    assert url == f"http://127.0.0.1:{port}"
    assert HANDED_DOWN_SOCKET not in os.environ, "read once, not passed on to the runs' commands"
    assert kept == whose.startswith("another"), whose

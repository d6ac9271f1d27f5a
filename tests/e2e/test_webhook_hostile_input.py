"""Hostile webhook traffic against a running `serve` (SPEC 15): stalled bodies are cut off
by the body deadline, and requests stalled in their headers by the server's deadline, and
never hold the process's memory or connections; a signed body
nesting too deep is a 400 without a traceback anywhere; a delivery without an id is
refused, a replayed id ignored; the web server's own warnings go to the agent's log file,
not to stderr; and a normal signed delivery still starts its task."""

from __future__ import annotations

import asyncio
import re
import signal
import socket
import subprocess
import uuid
from pathlib import Path
from typing import Any

import httpx

from coding_agent.sandbox.replay_model import ReplaySandbox
from tests.support.github_webhooks import GitHubWebhooks
from tests.support.waiting import wait_for

from ._steering import start_serve, steering_config, stop_serve
from .conftest import HELLO_SCRIPT, MAINTAINER, REPO, GitHubForge

SECRET = "whsec-" + "hostile0123456789abcdef"
BODY_TIMEOUT_SECONDS = 3
ONE_MIB = 1024 * 1024
STALLED_SIGNED = 200
STALLED_UNSIGNED = 40
STALLED_IN_HEADERS = 20
# What the stalled bodies would hold if read whole: 200 MiB. Back near the baseline means
# under half of that above it (uvicorn reads up to a few hundred KiB of each connection
# before the refusal, and the allocator keeps some of what was freed: about +35 MiB here).
RSS_MARGIN_BYTES = 100 * ONE_MIB


def _webhook_config(tmp_path: Path, forge: GitHubForge, model: ReplaySandbox) -> Any:
    return steering_config(
        tmp_path,
        [forge],
        model,
        scheduling={"interval_seconds": 3600},
        dashboard={"bind": "127.0.0.1:0"},
        webhooks={"github_secret": SECRET, "body_timeout_seconds": BODY_TIMEOUT_SECONDS},
    )


def _deliver(url: str, event: str, payload: dict[str, Any], delivery: str | None = None) -> httpx.Response:
    body = GitHubWebhooks.body(payload)
    return httpx.post(
        f"{url}/webhooks/github", content=body, headers=GitHubWebhooks.headers(event, body, SECRET, delivery), timeout=60
    )


def _label_by_webhook(url: str, forge: GitHubForge, title: str) -> int:
    number = forge.open_task("issue", title, "Please add hello.txt.")
    hooks = GitHubWebhooks(forge.sandbox.state, forge.url)
    response = _deliver(url, "issues", hooks.issues(REPO, number, "labeled", MAINTAINER, label="coding agent"))
    assert response.status_code == 202, response.text
    return number


def _rss_bytes(pid: int) -> int:
    status = Path(f"/proc/{pid}/status").read_text()
    return int(re.search(r"^VmRSS:\s+(\d+) kB", status, re.MULTILINE).group(1)) * 1024  # type: ignore[union-attr]


def _open_connections(pid: int, port: int) -> int:
    """Established TCP connections of process `pid` on its local `port`."""
    inodes = set()
    for fd in Path(f"/proc/{pid}/fd").iterdir():
        try:
            target = fd.readlink().name
        except OSError:
            continue
        if target.startswith("socket:["):
            inodes.add(target[8:-1])
    count = 0
    for table in ("tcp", "tcp6"):
        for line in Path(f"/proc/{pid}/net/{table}").read_text().splitlines()[1:]:
            fields = line.split()
            local_port = int(fields[1].rsplit(":", 1)[1], 16)
            if local_port == port and fields[3] == "01" and fields[9] in inodes:
                count += 1
    return count


def _stalled_request(port: int, *, signed: bool, sent: int) -> bytes:
    """Headers declaring a 1 MiB-1 body, then `sent` bytes of it: the rest never comes."""
    headers = [
        "POST /webhooks/github HTTP/1.1",
        f"Host: 127.0.0.1:{port}",
        "Content-Type: application/json",
        "X-GitHub-Event: issues",
        f"X-GitHub-Delivery: {uuid.uuid4()}",
        f"Content-Length: {ONE_MIB - 1}",
    ]
    if signed:
        headers.append("X-Hub-Signature-256: sha256=" + "0" * 64)
    return ("\r\n".join(headers) + "\r\n\r\n").encode() + b"{" + b" " * (sent - 1)


async def _until_closed_by_server(reader: asyncio.StreamReader) -> None:
    try:
        while await reader.read(65536):
            pass
    except ConnectionError:
        pass


async def _stall_and_wait_for_close(port: int, pid: int, peak: list[int]) -> None:
    """Open the stalled connections, then wait until the server has closed every one."""
    requests = [_stalled_request(port, signed=True, sent=ONE_MIB - 2) for _ in range(STALLED_SIGNED)]
    requests += [_stalled_request(port, signed=False, sent=10) for _ in range(STALLED_UNSIGNED)]
    requests += [_stalled_request(port, signed=True, sent=10)[:60] for _ in range(STALLED_IN_HEADERS)]
    connections = []
    for request in requests:
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.write(request)  # flushed in the background; never drained: the server may refuse it
        connections.append((reader, writer))
    peak.append(_rss_bytes(pid))
    try:
        await asyncio.wait_for(
            asyncio.gather(*(_until_closed_by_server(reader) for reader, _ in connections)),
            BODY_TIMEOUT_SECONDS + 90,
        )
    except TimeoutError:
        raise AssertionError(f"serve still holds stalled webhook connections {BODY_TIMEOUT_SECONDS + 90}s later") from None
    finally:
        peak.append(_rss_bytes(pid))
        for _, writer in connections:
            writer.transport.abort()


def test_stalled_webhook_bodies_are_cut_off_and_release_memory_and_connections(
    github_forge: GitHubForge, tmp_path: Path
) -> None:
    with ReplaySandbox({"replies": HELLO_SCRIPT["replies"] * 2}) as model:
        setup = _webhook_config(tmp_path, github_forge, model)
        process, url = start_serve(setup.config_path, tmp_path / "serve.stderr")
        try:
            port = int(url.rsplit(":", 1)[1])
            first = _label_by_webhook(url, github_forge, "Before the flood")
            wait_for(lambda: "coding agent done" in github_forge.labels("issue", first), 120, "the first task to end")
            baseline = _rss_bytes(process.pid)

            peak: list[int] = []
            asyncio.run(_stall_and_wait_for_close(port, process.pid, peak))
            wait_for(lambda: _open_connections(process.pid, port) == 0, 60, "serve to close every stalled connection")
            wait_for(
                lambda: _rss_bytes(process.pid) < baseline + RSS_MARGIN_BYTES,
                60,
                f"serve's RSS back near its baseline {baseline >> 20} MiB (peak {max(peak) >> 20} MiB)",
            )

            second = _label_by_webhook(url, github_forge, "After the flood")
            wait_for(lambda: "coding agent done" in github_forge.labels("issue", second), 120, "the second task to end")
        finally:
            stop_serve(process)
    assert process.returncode == 0, (tmp_path / "serve.stderr").read_text()[-3000:]


def _raw_exchange(port: int, request: bytes) -> bytes:
    with socket.create_connection(("127.0.0.1", port), timeout=30) as client:
        client.sendall(request)
        return client.recv(65536)


def test_deep_json_missing_ids_and_replays_are_refused_without_a_traceback(
    github_forge: GitHubForge, tmp_path: Path
) -> None:
    hooks = GitHubWebhooks(github_forge.sandbox.state, github_forge.url)
    with ReplaySandbox(HELLO_SCRIPT) as model:
        setup = _webhook_config(tmp_path, github_forge, model)
        process, url = start_serve(setup.config_path, tmp_path / "serve.stderr")
        try:
            deep = b'{"a": ' + b"[" * 100_000 + b"]" * 100_000 + b"}"
            nested = httpx.post(f"{url}/webhooks/github", content=deep, headers=hooks.headers("issues", deep, SECRET))
            number = github_forge.open_task("issue", "Add a greeting file", "Please add hello.txt.")
            labeled = GitHubWebhooks.body(hooks.issues(REPO, number, "labeled", MAINTAINER, label="coding agent"))
            headers = hooks.headers("issues", labeled, SECRET)
            without_id = {name: value for name, value in headers.items() if name != "X-GitHub-Delivery"}
            anonymous = httpx.post(f"{url}/webhooks/github", content=labeled, headers=without_id)
            first = httpx.post(f"{url}/webhooks/github", content=labeled, headers=headers)
            replayed = httpx.post(f"{url}/webhooks/github", content=labeled, headers=headers)
            garbage = _raw_exchange(int(url.rsplit(":", 1)[1]), b"NOT HTTP AT ALL\r\n\r\n")
            wait_for(lambda: "coding agent done" in github_forge.labels("issue", number), 120, "the task to end")
        finally:
            stop_serve(process)
        requests = model.requests

    assert (nested.status_code, "deeper than 64" in nested.text) == (400, True), nested.text
    assert (anonymous.status_code, "X-GitHub-Delivery" in anonymous.text) == (400, True), anonymous.text
    assert (first.status_code, replayed.status_code) == (202, 200)
    assert "duplicate delivery ignored" in replayed.text
    assert garbage.startswith(b"HTTP/1.1 400")
    assert len({request.conversation for request in requests}) == 1, "one run: the replay enqueued nothing"
    stderr = (tmp_path / "serve.stderr").read_text()
    log = (setup.logs / "coding-agent.log").read_text()
    assert "Traceback" not in stderr and "RecursionError" not in stderr, stderr[-3000:]
    assert "Traceback" not in log and "RecursionError" not in log, log[-3000:]
    assert "Invalid HTTP request" not in stderr, "the web server's warnings go to the agent's log, not stderr"
    assert "Invalid HTTP request" in log
    assert process.returncode == 0, stderr[-3000:]

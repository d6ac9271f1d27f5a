"""A restart (`scheduling.restart_after_runs`) never widens the service's reach (SPEC 15,
"Widen its own reach by configuration changes"): the socket handed down to the new image
is kept only when it listens exactly where the new configuration binds (family, resolved
address, port), otherwise it is closed and the configured address bound anew; whether the
dashboard needs its token follows the socket actually listening, not the configured name.

The attack: `dashboard.bind: 0.0.0.0:P` with a token, narrowed by the operator to
`localhost:P` without one; at the next restart a kept socket would go on listening on
every address, now without a token, so another machine could read and steer the tasks."""

from __future__ import annotations

import asyncio
import contextlib
import os
import re
import secrets
import socket
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml

from coding_agent.runtime.service import AgentService
from coding_agent.sandbox.replay_model import ReplaySandbox
from coding_agent.web.server import HANDED_DOWN_SOCKET, bind_socket, serving_http
from tests.support.github_webhooks import GitHubWebhooks
from tests.support.waiting import wait_for

from ._steering import start_serve, steering_config, stop_serve
from .conftest import HELLO_SCRIPT, MAINTAINER, REPO, GitHubForge, load_for_service

SECRET = "whsec-" + secrets.token_hex(12)
STARTED_AFRESH = "starting afresh (scheduling.restart_after_runs)"


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("0.0.0.0", 0))
        return int(probe.getsockname()[1])


def _listening(pid: int) -> dict[tuple[str, int], str]:
    """The TCP sockets process `pid` listens on: (address, port) -> socket inode."""
    inodes = set()
    for fd in Path(f"/proc/{pid}/fd").iterdir():
        with contextlib.suppress(OSError):
            target = fd.readlink().name
            if target.startswith("socket:["):
                inodes.add(target[8:-1])
    found = {}
    for table in ("tcp", "tcp6"):
        for line in Path(f"/proc/{pid}/net/{table}").read_text().splitlines()[1:]:
            fields = line.split()
            address, port = fields[1].split(":")
            if fields[3] == "0A" and fields[9] in inodes:  # LISTEN
                raw = bytes.fromhex(address)
                # /proc prints each 32-bit word in host (little-endian) order
                words = b"".join(raw[i : i + 4][::-1] for i in range(0, len(raw), 4))
                text = socket.inet_ntop(socket.AF_INET if len(raw) == 4 else socket.AF_INET6, words)
                found[(text, int(port, 16))] = fields[9]
    return found


def _outward_address() -> str | None:
    """An address of this machine that is not loopback (the one its default route leaves
    by), or None when it has none. A UDP `connect` sends nothing."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
        try:
            probe.connect(("203.0.113.1", 9))
        except OSError:
            return None
        address = str(probe.getsockname()[0])
    return None if address.startswith("127.") or address == "0.0.0.0" else address


def _label_by_webhook(port: int, forge: GitHubForge, number: int) -> int:
    hooks = GitHubWebhooks(forge.sandbox.state, forge.url)
    body = GitHubWebhooks.body(hooks.issues(REPO, number, "labeled", MAINTAINER, label="coding agent"))
    response = httpx.post(
        f"http://127.0.0.1:{port}/webhooks/github",
        content=body,
        headers=GitHubWebhooks.headers("issues", body, SECRET),
        timeout=60,
    )
    return response.status_code


def _restart_with(
    forge: GitHubForge, tmp_path: Path, first: dict[str, Any], second: dict[str, Any]
) -> tuple[dict[tuple[str, int], str], dict[tuple[str, int], str], int, Any]:
    """`serve` started with the dashboard settings `first`, its config file then rewritten
    with `second`, and restarted by its one run: the sockets it listened on before and
    after, the port, and what `GET /api/tasks` answered after the restart on loopback and on
    an outward address of the machine (None: refused)."""
    number = forge.open_task("issue", "Add a greeting file", "Please add hello.txt.")
    stderr = tmp_path / "serve.stderr"
    port = int(first["bind"].rsplit(":", 1)[1])
    with ReplaySandbox(HELLO_SCRIPT) as model:
        setup = steering_config(
            tmp_path,
            [forge],
            model,
            scheduling={"interval_seconds": 3600, "restart_after_runs": 1},
            dashboard=first,
            webhooks={"github_secret": SECRET},
        )
        log = setup.logs / "coding-agent.log"
        process, _ = start_serve(setup.config_path, stderr)
        try:
            before = _listening(process.pid)
            data = yaml.safe_load(setup.config_path.read_text())
            data["dashboard"] = second
            setup.config_path.write_text(yaml.safe_dump(data, sort_keys=False))
            assert _label_by_webhook(port, forge, number) == 202
            wait_for(lambda: "coding agent done" in forge.labels("issue", number), 120, "the task to end")
            wait_for(lambda: STARTED_AFRESH in log.read_text(), 120, "serve to start afresh")
            wait_for(lambda: len(re.findall(r"dashboard at (http://\S+)", stderr.read_text())) >= 2, 120, "the new image to serve")
            after = _listening(process.pid)
            answers = {}
            for address in ("127.0.0.1", _outward_address()):
                if address is None:
                    continue
                try:  # naming a Host the dashboard serves, as an attacker would
                    answers[address] = httpx.get(
                        f"http://{address}:{port}/api/tasks", headers={"Host": f"localhost:{port}"}, timeout=30
                    ).status_code
                except httpx.ConnectError:
                    answers[address] = None
        finally:
            stop_serve(process)
    text = log.read_text()
    assert "Traceback" not in text and " ERROR " not in text, text[-3000:]
    assert process.returncode == 0, stderr.read_text()[-3000:]
    return before, after, port, answers


def test_a_restart_after_the_bind_was_narrowed_listens_on_loopback_only(github_forge: GitHubForge, tmp_path: Path) -> None:
    port = _free_port()
    token = secrets.token_urlsafe(24)
    before, after, port, answers = _restart_with(
        github_forge, tmp_path, {"bind": f"0.0.0.0:{port}", "token": token}, {"bind": f"localhost:{port}"}
    )

    assert set(before) == {("0.0.0.0", port)}
    assert set(after) == {("127.0.0.1", port)}, f"the new image listens where `localhost` resolves, only: {after}"
    outward = [address for address in answers if address != "127.0.0.1"]
    for address in outward:
        assert answers[address] is None, f"reached from {address}: {answers[address]}"
    assert answers["127.0.0.1"] == 200, "on loopback, without a token, as configured"


def test_a_restart_with_the_same_bind_keeps_its_socket_and_its_token(github_forge: GitHubForge, tmp_path: Path) -> None:
    port = _free_port()
    token = secrets.token_urlsafe(24)
    dashboard = {"bind": f"0.0.0.0:{port}", "token": token}
    before, after, port, answers = _restart_with(github_forge, tmp_path, dashboard, dashboard)

    assert set(before) == {("0.0.0.0", port)}
    assert after == before, "the very socket handed down (same inode), so no delivery meanwhile was refused"
    assert set(answers.values()) == {401}, f"still beyond localhost: the token is required: {answers}"


def test_a_restart_from_an_address_to_a_name_resolving_to_it_keeps_its_socket(
    github_forge: GitHubForge, tmp_path: Path
) -> None:
    port = _free_port()
    before, after, port, answers = _restart_with(
        github_forge, tmp_path, {"bind": f"127.0.0.1:{port}"}, {"bind": f"localhost:{port}"}
    )

    assert set(before) == {("127.0.0.1", port)}
    assert after == before, "`localhost` resolves to the address the socket listens on: kept"
    assert answers["127.0.0.1"] == 200
    assert all(answer is None for address, answer in answers.items() if address != "127.0.0.1")


async def _serve_once(config: Any, sock: socket.socket | None, probe: str) -> tuple[str | None, dict, int]:
    """`serving_http` of `config` (on `sock` when given): its URL, the sockets this process
    listens on meanwhile, and what `GET probe` over loopback answered."""
    service = AgentService(config)
    try:
        async with serving_http(service.config, service, sock) as url:
            listening = _listening(os.getpid())
            port = int(str(url).rsplit(":", 1)[1])
            async with httpx.AsyncClient() as client:
                answer = await client.get(f"http://127.0.0.1:{port}{probe}", headers={"Host": f"localhost:{port}"})
            return url, listening, answer.status_code
    finally:
        await service.aclose()


def test_a_handed_down_socket_on_every_address_is_closed_when_localhost_is_configured(
    github_forge: GitHubForge, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The restart's hand-down in process: the old image's socket on 0.0.0.0:P, the new
    configuration `localhost:P`: the socket is closed before 127.0.0.1:P is bound (the same
    port, so the order matters), and nothing listens on 0.0.0.0:P any more."""
    wide = bind_socket("0.0.0.0", 0)
    port = wide.getsockname()[1]
    monkeypatch.setenv(HANDED_DOWN_SOCKET, f"{os.getpid()}:{wide.fileno()}")
    with ReplaySandbox(HELLO_SCRIPT) as model:
        setup = steering_config(
            tmp_path, [github_forge], model, dashboard={"bind": f"localhost:{port}"}, webhooks={"github_secret": SECRET}
        )
        try:
            url, listening, _ = asyncio.run(_serve_once(load_for_service(setup), None, "/api/tasks"))
        finally:
            wide.detach()  # closed by the server (or leaked, and the assertion below says so)

    assert url == f"http://127.0.0.1:{port}"
    assert ("0.0.0.0", port) not in listening and ("127.0.0.1", port) in listening, listening


def test_the_token_follows_the_socket_listening_not_the_configured_name(
    github_forge: GitHubForge, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """`dashboard.bind: localhost:P` without a token, served on a socket listening on every
    address (as a name resolving to a wider address would give): the dashboard refuses
    every request rather than serve the network without a token; the webhooks still work."""
    with ReplaySandbox(HELLO_SCRIPT) as model:
        setup = steering_config(
            tmp_path, [github_forge], model, dashboard={"bind": "localhost:8080"}, webhooks={"github_secret": SECRET}
        )
        wide = bind_socket("0.0.0.0", 0)
        _, _, tasks = asyncio.run(_serve_once(load_for_service(setup), wide, "/api/tasks"))
        narrow = bind_socket("127.0.0.1", 0)
        _, _, local_tasks = asyncio.run(_serve_once(load_for_service(setup), narrow, "/api/tasks"))

    assert tasks == 401, "beyond localhost without a configured token: refused"
    assert local_tasks == 200, "on loopback, as configured: open"
    assert "beyond localhost, and dashboard.token is not set" in caplog.text


@pytest.fixture(autouse=True)
def _ipv4_any_address() -> None:
    """These tests bind 0.0.0.0: skip where the machine cannot."""
    try:
        with socket.socket() as probe:
            probe.bind(("0.0.0.0", 0))
    except OSError as error:  # pragma: no cover - depends on the machine
        pytest.skip(f"cannot bind 0.0.0.0: {error}")

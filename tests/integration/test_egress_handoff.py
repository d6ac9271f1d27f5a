"""The sandbox hands its listening port to the egress proxy (SCM_RIGHTS), and a hostile
sandbox cannot break, crash or drain the proxy through the same socket.

Real bwrap, real sockets, the real proxy in this process: its descriptors are counted in
/proc/self/fd. The hostile clients are Python scripts run inside the sandbox, talking to
the socket bound into it, as any command the model runs could.
"""

from __future__ import annotations

import asyncio
import os
import shutil
import socket
import subprocess
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest

from coding_agent.tools.egress_handoff import HANDSHAKE, LEASE_FD, MAX_PENDING
from coding_agent.tools.egress_proxy import MAX_CLIENTS, EgressProxy, blocked_lines, socket_directory
from coding_agent.tools.egress_sandbox import EgressSandbox, no_proxy_value, python_path
from coding_agent.tools.sandbox import bwrap_usable, run_command
from tests.support.package_index import PackageIndex
from tests.support.waiting import wait_until

pytestmark = pytest.mark.skipif(shutil.which("curl") is None, reason="curl")
needs_sandbox = pytest.mark.skipif(
    not bwrap_usable(Path("/tmp")) or python_path() is None, reason="bwrap and a system python3"
)


def _open_fds() -> frozenset[tuple[str, str]]:
    """This process's open descriptors, each with what it is open on (a socket's or a
    pipe's inode, a file): compared as sets, a descriptor of someone else's that closed
    meanwhile (a command's pipes still being closed when `before` was taken, on a busy
    machine) is no difference, and a new one is, even under a number used before."""
    found = set()
    for number in os.listdir("/proc/self/fd"):
        try:
            found.add((number, os.readlink(f"/proc/self/fd/{number}")))
        except FileNotFoundError:  # the listing's own descriptor, closed by now
            pass
    return frozenset(found)


@pytest.fixture(scope="module")
def index() -> Iterator[PackageIndex]:
    with PackageIndex() as served:
        yield served


@pytest.fixture
async def proxy(index: PackageIndex) -> AsyncIterator[EgressProxy]:
    async with EgressProxy([], [f"127.0.0.1:{index.port}"]) as started:
        started.phase, started.command = "run", "the test's command"
        yield started


async def _curl(port: int, url: str) -> str:
    process = await asyncio.create_subprocess_exec(
        "curl", "-sS", "--max-time", "20", "--proxy", f"http://127.0.0.1:{port}", url,
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
    )  # fmt: skip
    out, _ = await process.communicate()
    return out.decode()


async def _hand_over(proxy: EgressProxy, listener: socket.socket) -> socket.socket:
    """What the forwarder does, from the host: send the listener (no answer comes)."""
    leases = proxy.leases
    lease = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    lease.connect(str(proxy.socket_path))
    socket.send_fds(lease, [HANDSHAKE], [listener.fileno()])
    await wait_until(lambda: proxy.leases == leases + 1, 10, "the proxy to take the listener")
    return lease


async def test_a_handed_over_listener_is_served_until_its_lease_ends(proxy: EgressProxy, index: PackageIndex) -> None:
    """On the host (same mechanism, no sandbox): the proxy accepts on the socket it was
    given, one hop to the origin; closing the lease connection closes that socket."""
    before = _open_fds()
    listener = socket.create_server(("127.0.0.1", 0))
    port = listener.getsockname()[1]
    lease = await _hand_over(proxy, listener)
    listener.close()  # the proxy holds its own reference now, as after the forwarder's exec
    assert proxy.leases == 1
    assert await _curl(port, f"{index.url}/hello") == "hello through the proxy\n"
    lease.close()
    await wait_until(lambda: proxy.leases == 0, 10, "the lease to end")
    with pytest.raises(ConnectionRefusedError):
        socket.create_connection(("127.0.0.1", port), timeout=5).close()
    await wait_until(lambda: _open_fds() <= before, 10, "the proxy's descriptors to be back to where they were")


@pytest.mark.parametrize(
    "what",
    ["no descriptor", "two descriptors", "a pipe", "a datagram socket", "a connected socket", "wrong words"],
)
async def test_a_wrong_handoff_is_refused_and_nothing_is_kept(proxy: EgressProxy, what: str) -> None:
    before = _open_fds()
    listener = socket.create_server(("127.0.0.1", 0))
    read_end, write_end = os.pipe()
    udp = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    other = socket.create_connection(listener.getsockname())
    message, fds = {
        "no descriptor": (HANDSHAKE, []),
        "two descriptors": (HANDSHAKE, [listener.fileno(), listener.fileno()]),
        "a pipe": (HANDSHAKE, [read_end]),
        "a datagram socket": (HANDSHAKE, [udp.fileno()]),
        "a connected socket": (HANDSHAKE, [other.fileno()]),
        "wrong words": (b"GET / HTTP/1.1\r\n\r\n", [listener.fileno()]),
    }[what]
    ours = _open_fds() - before
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as lease:
        lease.connect(str(proxy.socket_path))
        socket.send_fds(lease, [message], fds)
        lease.settimeout(10)
        assert await asyncio.to_thread(lease.recv, 1) == b""  # closed by the proxy
    assert proxy.leases == 0
    await wait_until(lambda: _open_fds() <= before | ours, 10, "the received descriptors to be closed")
    for end in (listener, udp, other):
        end.close()
    os.close(read_end)
    os.close(write_end)


async def test_too_many_waiting_connections_are_closed_and_the_proxy_goes_on(
    proxy: EgressProxy, index: PackageIndex
) -> None:
    before = _open_fds()
    idle = [socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) for _ in range(MAX_PENDING + 8)]

    def connect_all() -> None:  # in a thread: a full backlog blocks connect until the proxy accepts
        for connection in idle:
            connection.connect(str(proxy.socket_path))

    await asyncio.to_thread(connect_all)
    extra = idle[-1]
    extra.settimeout(10)
    assert await asyncio.to_thread(extra.recv, 1) == b""  # over the cap: closed at once
    for connection in idle:
        connection.close()
    await wait_until(lambda: _open_fds() <= before, 10, "the proxy to close the idle connections")
    listener = socket.create_server(("127.0.0.1", 0))
    lease = await _hand_over(proxy, listener)
    assert await _curl(listener.getsockname()[1], f"{index.url}/hello") == "hello through the proxy\n"
    listener.close()
    lease.close()
    await wait_until(lambda: proxy.leases == 0 and _open_fds() <= before, 10, "every connection to be closed")


async def test_too_many_client_connections_get_503_and_the_proxy_goes_on(
    proxy: EgressProxy, index: PackageIndex
) -> None:
    before = _open_fds()
    listener = socket.create_server(("127.0.0.1", 0))
    port = listener.getsockname()[1]
    lease = await _hand_over(proxy, listener)
    idle = []
    for _ in range(MAX_CLIENTS):
        idle.append(socket.create_connection(("127.0.0.1", port)))
        await wait_until(lambda: proxy.clients == len(idle), 10, "the proxy to take the connection")
    assert await _curl(port, f"{index.url}/hello") == "coding-agent egress proxy: too many connections at once\n"
    for connection in idle:
        connection.close()
    await wait_until(lambda: proxy.clients == 0, 10, "the idle connections to be closed")
    assert await _curl(port, f"{index.url}/hello") == "hello through the proxy\n"
    listener.close()
    lease.close()
    await wait_until(lambda: proxy.leases == 0 and _open_fds() <= before, 10, "every connection to be closed")


# --- from inside the real sandbox --------------------------------------------------------------


@needs_sandbox
async def test_sandboxed_commands_reach_the_proxy_in_one_hop(
    proxy: EgressProxy, index: PackageIndex, tmp_path: Path
) -> None:
    """The command's connections are accepted by the proxy itself (no forwarder process
    stays in the sandbox), refusals name the command, and the sandbox's port is let go
    of when the command ends."""
    egress = EgressSandbox(proxy.socket_path, no_proxy_value([f"127.0.0.1:{index.port}"]))
    assert egress.chosen() == ("python", python_path())
    await run_command("true", tmp_path, 60, "bwrap", egress=egress)  # warm-up: the loop's lazy descriptors
    before = _open_fds()
    proxy.command = "curl http://169.254.169.254/"
    command = (
        f"curl -sS {index.url}/hello; curl -sS http://169.254.169.254/; "
        "ls /proc/self/fd; cat /proc/[0-9]*/comm | grep -c -e socat -e python || true"
    )
    result = await run_command(command, tmp_path, 60, "bwrap", egress=egress)
    lines = result.output.splitlines()
    assert lines[0] == "hello through the proxy", result.output
    assert "refused" in lines[1]
    assert str(LEASE_FD) in lines, "the lease is kept open in the command"
    assert lines[-1] == "0", "no forwarder process stays in the sandbox"
    assert blocked_lines(proxy.refusals) == ["blocked: 169.254.169.254:80, by `curl http://169.254.169.254/`"]
    await wait_until(lambda: proxy.leases == 0 and _open_fds() <= before, 10, "the sandbox's port to be let go of")


@needs_sandbox
async def test_exit_code_and_syntax_are_the_commands_own(proxy: EgressProxy, tmp_path: Path) -> None:
    egress = EgressSandbox(proxy.socket_path)
    result = await run_command("for x in 'a b' c; do echo \"[$x]\"; done; exit 7", tmp_path, 60, "bwrap", egress=egress)
    assert (result.exit_code, result.output) == (7, "[a b]\n[c]\n")


@needs_sandbox
async def test_the_command_runs_whatever_the_proxy_does_with_the_port(tmp_path: Path) -> None:
    """A proxy that hangs up: the command runs, its connections to the port are refused
    (nobody accepts once the forwarder exec'd). No proxy socket at all: the command runs
    and says why it has no network."""

    async def hang_up(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        writer.close()

    directory = socket_directory()  # tmp_path may be too deep for a Unix socket's path
    server = await asyncio.start_unix_server(hang_up, path=str(directory / "not-a-proxy.sock"))
    try:
        egress = EgressSandbox(directory / "not-a-proxy.sock")
        command = "curl -sS --max-time 10 http://example.invalid/ 2>&1 | grep -c 'Failed to connect'; exit 3"
        result = await run_command(command, tmp_path, 60, "bwrap", egress=egress)
    finally:
        server.close()
        shutil.rmtree(directory)
    # (the forwarder may or may not have sent before the hang-up: "Broken pipe" on stderr if not)
    assert (result.exit_code, result.output.splitlines()[-1]) == (3, "1"), result.output
    (tmp_path / "not-a-socket").write_text("")
    egress = EgressSandbox(tmp_path / "not-a-socket")
    result = await run_command("echo ran; exit 4", tmp_path, 60, "bwrap", egress=egress)
    assert result.exit_code == 4
    assert "ran" in result.output and "coding-agent: no network proxy in this sandbox" in result.output


HOSTILE = f"""
import array, os, socket, sys
PATH = "/tmp/.coding-agent-egress.sock"
HANDSHAKE = {HANDSHAKE!r}

def connect_and_send(message, fds):
    c = socket.socket(socket.AF_UNIX)
    c.connect(PATH)
    if fds:
        c.sendmsg([message], [(socket.SOL_SOCKET, socket.SCM_RIGHTS, array.array("i", fds))])
    else:
        c.sendall(message)
    c.settimeout(10)
    return c

def send(message, fds):
    c = connect_and_send(message, fds)
    try:
        return c.recv(100)
    finally:
        c.close()

r, w = os.pipe()
listener = socket.create_server(("127.0.0.1", 4000))
print("garbage:", send(b"\\x00\\xffgarbage\\r\\n\\r\\n", [])[:12])
print("no fd:", send(HANDSHAKE, []))
print("a pipe:", send(HANDSHAKE, [r]))
print("many fds:", send(HANDSHAKE, [r] * 200))
print("two fds:", send(HANDSHAKE, [listener.fileno(), r]))
unix = socket.socket(socket.AF_UNIX)
unix.bind("/tmp/hostile.sock")
unix.listen()
print("a unix listener:", send(HANDSHAKE, [unix.fileno()]))
idle = [socket.socket(socket.AF_UNIX) for _ in range(10)]
for c in idle:
    c.connect(PATH)
second = connect_and_send(HANDSHAKE, [listener.fileno()])
through = socket.create_connection(("127.0.0.1", 4000), timeout=10)
through.sendall(b"GET {{url}} HTTP/1.1\\r\\nHost: x\\r\\n\\r\\n")
print("second port:", through.recv(100).split(b"\\r\\n")[0])
second.close()
os.write({LEASE_FD}, b"garbage on the lease")
sys.stdout.flush()
"""


@needs_sandbox
async def test_a_hostile_sandbox_cannot_crash_or_drain_the_proxy(
    proxy: EgressProxy, index: PackageIndex, tmp_path: Path
) -> None:
    """Garbage, wrong or too many descriptors, idle connections, a second port, writes
    on the lease: each refused or harmless; the proxy keeps no descriptor of it once the
    command ended, and the next command reaches the listed host."""
    egress = EgressSandbox(proxy.socket_path, no_proxy_value([f"127.0.0.1:{index.port}"]))
    await run_command("true", tmp_path, 60, "bwrap", egress=egress)
    before = _open_fds()
    (tmp_path / "hostile.py").write_text(HOSTILE.replace("{url}", f"{index.url}/hello"))
    command = f"python3 hostile.py; curl -sS --max-time 5 {index.url}/hello || echo no-proxy-after-the-lease-ended"
    result = await run_command(command, tmp_path, 60, "bwrap", egress=egress)
    lines = result.output.splitlines()
    assert lines[0].startswith("garbage: b'HTTP/1.1 400"), result.output
    assert lines[1:7] == [
        "no fd: b''",
        "a pipe: b''",
        "many fds: b''",
        "two fds: b''",
        "a unix listener: b''",
        "second port: b'HTTP/1.1 200 OK'",  # its own port in its own namespace: like the forwarder's
    ], result.output
    assert lines[-1] == "no-proxy-after-the-lease-ended" or "Failed to connect" in lines[-1], result.output
    assert proxy.refusals == []
    await wait_until(lambda: proxy.leases == 0 and _open_fds() <= before, 15, "the proxy to let go of everything")
    after = await run_command(f"curl -sS {index.url}/hello", tmp_path, 60, "bwrap", egress=egress)
    assert after.output == "hello through the proxy\n"


@needs_sandbox
@pytest.mark.skipif(shutil.which("socat") is None, reason="socat")
async def test_socat_is_the_fallback_forwarder(proxy: EgressProxy, index: PackageIndex, tmp_path: Path) -> None:
    """Where the sandbox has no python3, socat relays to the Unix socket, which then
    carries HTTP: the proxy tells it from a handoff by its first message."""
    egress = EgressSandbox(proxy.socket_path, no_proxy_value([f"127.0.0.1:{index.port}"]), forwarder="socat")
    assert egress.chosen() is not None and egress.chosen()[0] == "socat"  # type: ignore[index]
    command = f"for i in 1 2 3; do curl -sS {index.url}/hello; done; curl -sS http://169.254.169.254/"
    result = await run_command(command, tmp_path, 60, "bwrap", egress=egress)
    assert result.output.startswith("hello through the proxy\n" * 3), result.output
    assert "refused" in result.output and proxy.leases == 0
    assert [refusal.host for refusal in proxy.refusals] == ["169.254.169.254"]


"""The egress proxy with real clients: curl on the host through socat, and through bwrap.

The host-side tests forward a TCP port to the proxy's Unix socket with socat, the same
forwarder the sandbox runs inside; the sandbox tests run real bwrap commands.
"""

from __future__ import annotations

import asyncio
import hashlib
import os
import re
import shutil
import socket
import stat
import subprocess
import sys
import tempfile
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest

from coding_agent.tools.egress_proxy import MAX_SOCKET_PATH, EgressProxy, EgressUnavailable, blocked_lines
from coding_agent.tools.egress_sandbox import EgressSandbox, no_proxy_value
from coding_agent.tools.sandbox import bwrap_usable, run_command
from tests.support.package_index import PackageIndex
from tests.support.waiting import wait_for, wait_until

pytestmark = pytest.mark.skipif(shutil.which("socat") is None or shutil.which("curl") is None, reason="socat/curl")


@pytest.fixture(scope="module")
def index() -> Iterator[PackageIndex]:
    with PackageIndex() as served:
        yield served


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


async def _rebinding_resolver(host: str, port: int) -> list[str]:
    if host == "rebind.test":
        return ["127.0.0.1"]
    loop = asyncio.get_running_loop()
    return [str(info[4][0]) for info in await loop.getaddrinfo(host, port, type=socket.SOCK_STREAM)]


class Client:
    """curl on the host, through a socat forwarder to the proxy's socket."""

    def __init__(self, proxy: EgressProxy, port: int) -> None:
        self.proxy = proxy
        self.port = port

    async def curl(self, *args: str) -> tuple[str, str]:
        process = await asyncio.create_subprocess_exec(
            "curl", "-sS", "--max-time", "20", "--proxy", f"http://127.0.0.1:{self.port}", *args,
            stdout=subprocess.PIPE, stderr=subprocess.PIPE,
        )  # fmt: skip
        out, err = await process.communicate()
        return out.decode(), err.decode()


@pytest.fixture
async def client(index: PackageIndex) -> AsyncIterator[Client]:
    listed = f"127.0.0.1:{index.port}"
    async with EgressProxy([listed], [listed, "rebind.test"], resolver=_rebinding_resolver) as proxy:
        proxy.phase, proxy.command = "run", "curl test"
        port = _free_port()
        forwarder = subprocess.Popen(
            ["socat", f"TCP-LISTEN:{port},bind=127.0.0.1,fork,reuseaddr", f"UNIX-CONNECT:{proxy.socket_path}"]
        )
        try:
            wait_for(lambda: _listening(port), 10, "the socat forwarder")
            yield Client(proxy, port)
        finally:
            forwarder.kill()
            forwarder.wait()


def _listening(port: int) -> bool:
    try:
        socket.create_connection(("127.0.0.1", port), timeout=1).close()
    except OSError:
        return False
    return True


async def test_listed_host_is_forwarded(client: Client, index: PackageIndex) -> None:
    out, err = await client.curl(f"{index.url}/hello")
    assert out == "hello through the proxy\n", err
    assert client.proxy.refusals == []


async def test_connect_tunnel_to_listed_host(client: Client, index: PackageIndex) -> None:
    out, err = await client.curl("--proxytunnel", f"{index.url}/hello")
    assert out == "hello through the proxy\n", err


async def test_unlisted_host_and_port_refused_and_recorded(client: Client, index: PackageIndex) -> None:
    out, _ = await client.curl("http://example.invalid/")
    assert "refused" in out and "security.egress.run_hosts" in out
    _, err = await client.curl("--proxytunnel", f"http://127.0.0.1:{index.port + 1}/")
    assert "403" in err
    hosts = [(refusal.host, refusal.port, refusal.command) for refusal in client.proxy.refusals]
    assert hosts == [("example.invalid", 80, "curl test"), ("127.0.0.1", index.port + 1, "curl test")]
    assert blocked_lines(client.proxy.refusals + client.proxy.refusals) == [
        "blocked: example.invalid:80, by `curl test`",
        f"blocked: 127.0.0.1:{index.port + 1}, by `curl test`",
    ]


async def test_metadata_address_refused(client: Client) -> None:
    out, _ = await client.curl("http://169.254.169.254/latest/meta-data/")
    assert "refused" in out and "169.254.169.254" in out
    assert client.proxy.refusals[-1].host == "169.254.169.254"


async def test_redirect_to_unlisted_host_is_checked_again(client: Client, index: PackageIndex) -> None:
    out, _ = await client.curl("-L", f"{index.url}/redirect?to=http://169.254.169.254/")
    assert "refused" in out
    assert "/redirect" in index.requests
    assert client.proxy.refusals[-1].host == "169.254.169.254"


async def test_listed_name_rebinding_to_loopback_refused(client: Client) -> None:
    out, _ = await client.curl("http://rebind.test/")
    assert "resolves to 127.0.0.1" in out


@pytest.mark.parametrize(
    "raw",
    [
        b"GET http://exa mple.com/ HTTP/1.1\r\n\r\n",
        b"GET http://user@127.0.0.1:1/ HTTP/1.1\r\nHost: x\r\n\r\n",
        b"CONNECT 127.0.0.1 HTTP/1.1\r\n\r\n",
        b"CONNECT [::1:443 HTTP/1.1\r\n\r\n",
        b"GET / HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n",
        b"\x00\xff garbage\r\n\r\n",
        b"GET http://127.0.0.1:1/ HTTP/2.0\r\n\r\n",
        b"GET http://127.0.0.1:1/ HTTP/1.1\r\nHost : 127.0.0.1:1\r\n\r\n",
        b"GET http://127.0.0.1:1/ HTTP/1.1\r\nX-A: b\rHost: c\r\n\r\n",
        b"GET http://127.0.0.1:1/ HTTP/1.1\r\nX-A: b\x00c\r\n\r\n",
        b"GET http://127.0.0.1:1/ HTTP/1.1\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\n",
        b"GET http://127.0.0.1:1/ HTTP/1.1\r\nContent-Length: -1\r\n\r\n",
        b"GET http://127.0.0.1:1/ HTTP/1.1\nHost: 127.0.0.1:1\n\n",
        b"CONNECT 127.0.0.1:443 HTTP/1.1\r\nHost: 127.0.0.1:443\r\n\tfolded\r\n\r\n",
        b"CONNECT 127.0.0.1:443 HTTP/1.1\r\nHost: 127.0.0.1:443\r\nHost: 10.0.0.1:443\r\n\r\n",
    ],
)
async def test_malformed_requests_get_400(raw: bytes) -> None:
    async with EgressProxy([], []) as proxy:
        reader, writer = await asyncio.open_unix_connection(str(proxy.socket_path))
        writer.write(raw)
        answer = await asyncio.wait_for(reader.read(), 10)
        writer.close()
        assert answer.startswith(b"HTTP/1.1 400 "), answer


async def test_a_chunked_body_is_refused_with_411() -> None:
    """Where a chunked body ends is a second parser's to agree on: a body needs a Content-Length."""
    async with EgressProxy([], []) as proxy:
        reader, writer = await asyncio.open_unix_connection(str(proxy.socket_path))
        writer.write(b"POST http://127.0.0.1:1/ HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n")
        answer = await asyncio.wait_for(reader.read(), 10)
        writer.close()
        assert answer.startswith(b"HTTP/1.1 411 ") and b"Content-Length" in answer, answer


async def test_a_deep_temp_directory_still_gets_a_socket(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The socket goes where its path fits (at most 107 bytes); where it cannot be made, the
    error is one line naming the path."""
    deep = tmp_path / ("d" * 120)
    deep.mkdir()
    monkeypatch.setenv("TMPDIR", str(deep))
    monkeypatch.setattr(tempfile, "tempdir", None)  # read TMPDIR again
    async with EgressProxy([], []) as proxy:
        assert len(os.fsencode(proxy.socket_path)) <= MAX_SOCKET_PATH
        assert stat.S_IMODE(proxy.socket_path.parent.stat().st_mode) == 0o700
        answer = await _exchange(proxy, b"GET http://127.0.0.1:1/ HTTP/1.1\r\n\r\n")
        assert answer.startswith(b"HTTP/1.1 403 "), answer
    assert not proxy.socket_path.parent.exists()
    with pytest.raises(EgressUnavailable) as raised:
        await EgressProxy([], [], socket_dir=deep).start()
    assert str(raised.value).startswith(f"the egress proxy cannot listen on {deep / 'proxy.sock'}: ")
    assert "\n" not in str(raised.value)


_HOLD_A_PROXY = """
import asyncio
from coding_agent.tools.egress_proxy import EgressProxy

async def main():
    async with EgressProxy([], []) as proxy:
        print(proxy.socket_path, flush=True)
        await asyncio.Event().wait()

asyncio.run(main())
"""


def test_a_killed_process_s_socket_directory_is_swept_by_the_next_one() -> None:
    """A process SIGKILLed with its proxy open leaves its socket directory behind; the next
    process's first socket directory in that place removes it, and nothing else: not a
    live process's, not one whose socket something still listens on (a process this one
    cannot see), not a directory not named after a process."""
    base = Path(tempfile.mkdtemp(prefix="ca-sweep-", dir="/tmp"))  # short: a socket's path fits
    environment = {**os.environ, "TMPDIR": str(base)}
    environment.pop("XDG_RUNTIME_DIR", None)
    holders = [
        subprocess.Popen([sys.executable, "-c", _HOLD_A_PROXY], env=environment, stdout=subprocess.PIPE, text=True)
        for _ in range(2)
    ]
    listener = socket.socket(socket.AF_UNIX)
    try:
        killed_socket, live_socket = (Path(holder.stdout.readline().strip()) for holder in holders)  # type: ignore[union-attr]
        assert killed_socket.parent.parent == base == live_socket.parent.parent
        holders[0].kill()
        holders[0].wait(30)
        assert killed_socket.parent.is_dir()  # nobody removed it
        unseen = base / f"ca-egress-{holders[0].pid}-unseen00"
        unseen.mkdir(mode=0o700)
        listener.bind(str(unseen / "proxy.sock"))
        listener.listen()
        unnamed = base / "ca-egress-notapid"
        unnamed.mkdir()

        made = subprocess.run(
            [sys.executable, "-c", "from coding_agent.tools.egress_proxy import socket_directory; print(socket_directory())"],
            env=environment, capture_output=True, text=True, timeout=60, check=True,
        )

        assert Path(made.stdout.strip()).parent == base
        assert not killed_socket.parent.exists()
        assert live_socket.parent.is_dir() and unseen.is_dir() and unnamed.is_dir()
        with socket.socket(socket.AF_UNIX) as client:  # the live proxy still answers
            client.settimeout(30)
            client.connect(str(live_socket))
            client.sendall(b"GET http://127.0.0.1:1/ HTTP/1.1\r\n\r\n")
            assert client.recv(12) == b"HTTP/1.1 403"
    finally:
        listener.close()
        for holder in holders:
            holder.kill()
            holder.wait(30)
            holder.stdout.close()  # type: ignore[union-attr]
        shutil.rmtree(base)


async def test_empty_probe_is_not_a_refusal() -> None:
    async with EgressProxy([], []) as proxy:
        _, writer = await asyncio.open_unix_connection(str(proxy.socket_path))
        writer.close()
        await writer.wait_closed()
        await asyncio.sleep(0)
        assert proxy.refusals == []
    assert not Path(proxy.socket_path).exists()


class _Origin:
    """An origin that answers every request it reads with `body` (random bytes: a reordered,
    dropped or doubled chunk changes the digest) and records each request head.

    It serves every request on a connection, whatever `Connection` says, until the
    client's EOF: the worst origin for a smuggled request, which it would answer too.
    """

    def __init__(self, body: bytes) -> None:
        self.body = body
        self.server: asyncio.Server | None = None
        self.heads: list[bytes] = []
        self.connections_done = 0

    async def __aenter__(self) -> str:
        async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            try:
                while True:
                    self.heads.append(await reader.readuntil(b"\r\n\r\n"))
                    writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n" % len(self.body))
                    writer.write(self.body)
                    await writer.drain()
            except (asyncio.IncompleteReadError, ConnectionError):
                pass
            finally:
                writer.close()
                self.connections_done += 1

        self.server = await asyncio.start_server(serve, "127.0.0.1", 0)
        return f"127.0.0.1:{self.server.sockets[0].getsockname()[1]}"

    async def __aexit__(self, *exc: object) -> None:
        assert self.server is not None
        self.server.close()


async def _download(proxy: EgressProxy, url: str, target: Path, *curl_args: str) -> None:
    """curl `url` into `target` through the proxy, by way of a socat forwarder (as on the host)."""
    port = _free_port()
    forwarder = subprocess.Popen(
        ["socat", f"TCP-LISTEN:{port},bind=127.0.0.1,fork,reuseaddr", f"UNIX-CONNECT:{proxy.socket_path}"]
    )
    try:
        wait_for(lambda: _listening(port), 10, "the socat forwarder")
        process = await asyncio.create_subprocess_exec(
            "curl", "-sS", "--max-time", "30", "--proxy", f"http://127.0.0.1:{port}", *curl_args,
            "-o", str(target), url,
        )  # fmt: skip
        assert await process.wait() == 0
    finally:
        forwarder.kill()
        forwarder.wait()


def _digest(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


@pytest.mark.parametrize("rate", [None, "4M"], ids=["fast-reader", "slow-reader"])
async def test_large_download_arrives_intact(rate: str | None, tmp_path: Path) -> None:
    """The body is spliced origin -> sandbox in the kernel: every byte, in order, also when
    the reader is slower than the origin (the splice then waits for the socket to drain)."""
    body = os.urandom(6 * 1024 * 1024)
    async with _Origin(body) as listed, EgressProxy([], [listed]) as proxy:
        proxy.phase = "run"
        await _download(proxy, f"http://{listed}/big", tmp_path / "body", *(["--limit-rate", rate] if rate else []))
    assert _digest((tmp_path / "body").read_bytes()) == _digest(body)
    assert proxy.refusals == []


async def _exchange(proxy: EgressProxy, request: bytes, after_the_response: bytes | None = None) -> bytes:
    """Send `request` on one connection to the proxy (and, once a whole response to it has
    arrived, `after_the_response`), half-close, and return all the proxy answered."""
    reader, writer = await asyncio.open_unix_connection(str(proxy.socket_path))
    try:
        writer.write(request)
        answer = b""
        if after_the_response is not None:
            answer = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 20)
            length = re.search(rb"Content-Length: (\d+)", answer)
            assert length is not None, answer
            answer += await asyncio.wait_for(reader.readexactly(int(length[1])), 20)
            writer.write(after_the_response)
        writer.write_eof()
        return answer + await asyncio.wait_for(reader.read(), 20)
    finally:
        writer.close()


_FIRST = b"GET http://ORIGIN/first HTTP/1.1\r\nHost: ORIGIN\r\n"
_SECOND = b"GET http://169.254.169.254/second HTTP/1.1\r\nHost: 169.254.169.254\r\n\r\n"
# attack: (what is sent, what is sent once its response arrived, the status answered);
# ORIGIN stands for the listed origin's host:port.
_SMUGGLING: dict[str, tuple[bytes, bytes | None, int]] = {
    "bare-LF-hides-a-second-Host": (_FIRST + b"X-Note: a\nHost: 169.254.169.254\r\n\r\n", None, 400),
    "obs-fold": (_FIRST + b"X-Note: a\r\n folded\r\n\r\n", None, 400),
    "duplicate-Host": (_FIRST + b"Host: 169.254.169.254\r\n\r\n", None, 400),
    "pipelined-in-one-write": (_FIRST + b"\r\n" + _SECOND, None, 200),
    "pipelined-after-the-response": (_FIRST + b"\r\n", _SECOND, 200),
    "pipelined-after-a-body": (
        b"POST http://ORIGIN/first HTTP/1.1\r\nContent-Length: 5\r\n\r\nhello" + _SECOND, None, 200
    ),
}


@pytest.mark.parametrize("attack", list(_SMUGGLING))
async def test_no_request_is_smuggled_past_the_checks(attack: str, tmp_path: Path) -> None:
    """SPEC 15: one request per connection, with one Host (the checked authority); bare LF,
    folded and duplicate headers refused. A refused head reaches the origin not at all, a
    second request on a connection never; and the proxy still serves a GET and a download."""
    sent, sent_after, status = _SMUGGLING[attack]
    body = os.urandom(1024 * 1024)
    origin = _Origin(body)
    async with origin as listed, EgressProxy([], [listed]) as proxy:
        proxy.phase = "run"
        authority = listed.encode()
        answer = await _exchange(proxy, sent.replace(b"ORIGIN", authority), sent_after)
        assert answer.startswith(b"HTTP/1.1 %d " % status), answer[:200]
        connections = 1 if status == 200 else 0
        await wait_until(lambda: origin.connections_done == connections, 20, "the origin's connection to end")
        assert len(origin.heads) == connections and b"second" not in b"".join(origin.heads), origin.heads
        assert answer.count(b"HTTP/1.1 200 ") <= 1, "one response on the connection"

        plain = b"GET http://ORIGIN/plain HTTP/1.1\r\nHost: elsewhere.example\r\nAccept: */*\r\n"
        plain += b"Connection: keep-alive, X-Hop\r\nX-Hop: 1\r\n\r\n"
        answer = await _exchange(proxy, plain.replace(b"ORIGIN", authority))
        assert answer.startswith(b"HTTP/1.1 200 ") and _digest(answer[-len(body) :]) == _digest(body)
        forwarded = b"GET /plain HTTP/1.1\r\nHost: ORIGIN\r\nAccept: */*\r\nConnection: close\r\n\r\n"
        assert origin.heads[-1] == forwarded.replace(b"ORIGIN", authority)
        await _download(proxy, f"http://{listed}/download", tmp_path / "download")
    assert _digest((tmp_path / "download").read_bytes()) == _digest(body)
    assert proxy.refusals == []


# --- through the real sandbox -------------------------------------------------------------

needs_bwrap = pytest.mark.skipif(not bwrap_usable(Path("/tmp")), reason="bwrap cannot create namespaces here")


@needs_bwrap
async def test_sandboxed_command_reaches_only_listed_hosts(index: PackageIndex, tmp_path: Path) -> None:
    listed = f"127.0.0.1:{index.port}"
    async with EgressProxy([], [listed]) as proxy:
        proxy.phase = "run"
        egress = EgressSandbox(proxy.socket_path, no_proxy_value([listed]))
        ok = await run_command(f"curl -sS {index.url}/hello", tmp_path, 60, "bwrap", egress=egress)
        assert ok.output == "hello through the proxy\n", ok.output
        proxy.command = "curl http://169.254.169.254/"
        metadata = await run_command("curl -sS http://169.254.169.254/", tmp_path, 60, "bwrap", egress=egress)
        assert "refused" in metadata.output
        direct = await run_command(
            f"curl -sS --noproxy '*' --max-time 5 {index.url}/hello", tmp_path, 60, "bwrap", egress=egress
        )
        assert direct.exit_code != 0 and "hello" not in direct.output  # no network of its own
    assert blocked_lines(proxy.refusals) == ["blocked: 169.254.169.254:80, by `curl http://169.254.169.254/`"]


@needs_bwrap
async def test_forwarder_is_ready_at_once_and_keeps_serving(index: PackageIndex, tmp_path: Path) -> None:
    """The command starts only once socat listens (its first request works), and socat
    keeps forwarding after the pipe its readiness notice came through is closed."""
    listed = f"127.0.0.1:{index.port}"
    async with EgressProxy([], [listed]) as proxy:
        proxy.phase = "run"
        egress = EgressSandbox(proxy.socket_path, no_proxy_value([listed]))
        command = f"for i in 1 2 3 4; do curl -sS {index.url}/hello; done"
        result = await run_command(command, tmp_path, 60, "bwrap", egress=egress)
    assert result.exit_code == 0, result.output
    assert result.output == "hello through the proxy\n" * 4


@needs_bwrap
async def test_sandbox_without_egress_has_no_proxy(tmp_path: Path) -> None:
    result = await run_command("echo ${HTTP_PROXY:-none}", tmp_path, 30, "bwrap")
    assert result.output.strip() == "none"


async def test_host_header_is_the_checked_authority(client: Client, index: PackageIndex) -> None:
    """A forged Host header cannot pick another site behind a listed address (shared fronts)."""
    out, err = await client.curl("-H", "Host: evil.example", f"{index.url}/echo-host")
    assert out == f"127.0.0.1:{index.port}\n", (out, err)


def test_blocked_lines_cannot_inject_markdown() -> None:
    from coding_agent.tools.egress_proxy import Refusal

    lines = blocked_lines([Refusal("@admin <b>x", 0, "malformed", "run", "curl `x`\n@boss")])
    assert lines == ["blocked: ?admin??b?x:0, by `curl 'x''@boss`"]


async def test_oversized_head_is_refused_without_reading_forever() -> None:
    async with EgressProxy([], []) as proxy:
        reader, writer = await asyncio.open_unix_connection(str(proxy.socket_path))
        writer.write(b"GET http://x/ HTTP/1.1\r\n" + b"X-Pad: " + b"a" * 200_000)
        answer = await asyncio.wait_for(reader.read(), 10)
        writer.close()
        assert answer.startswith(b"HTTP/1.1 431 "), answer[:80]

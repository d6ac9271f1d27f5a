"""The tests' PostgreSQL: a fresh database per test, or the test skipped where none runs;
and a server of a test's own, for the tests that kill it.

The CI machine runs PostgreSQL, so nothing is skipped there; a laptop without one still
runs every SQLite test. A fresh database, never the shared one: migrating that to this
branch's schema would break every other checkout's tests on the machine.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import stat
import subprocess
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from tests.support.services import fresh_postgres_database, postgres_admin_url, reachable
from tests.support.waiting import wait_for

__all__ = ["fresh_postgres_or_skip", "OwnPostgres", "own_postgres_or_skip"]


@contextmanager
def fresh_postgres_or_skip() -> Iterator[str]:
    """The URL of a fresh PostgreSQL database, dropped afterwards; skips the test when
    PostgreSQL is not reachable."""
    if not reachable(postgres_admin_url()):
        pytest.skip("PostgreSQL is not reachable at " + postgres_admin_url())
    with fresh_postgres_database() as url:
        yield url


def _directory_postgres_reaches() -> Path:
    """A fresh directory for the server's files that the `postgres` user can reach, with
    room for its socket's path: in the temp directory when every directory above it lets
    others pass and its path is short, else in /tmp. A private or deep TMPDIR is common (a
    CI runner's, systemd's PrivateTmp, `mktemp -d`), and initdb run as `postgres` fails there."""
    base = Path(tempfile.gettempdir())
    others_pass = all(os.stat(directory).st_mode & stat.S_IXOTH for directory in (base, *base.parents))
    if not others_pass or len(str(base)) > 40:
        base = Path("/tmp")
    return Path(tempfile.mkdtemp(prefix="coding-agent-pg-", dir=base))


class OwnPostgres:
    """A PostgreSQL server of the test's own (a temporary data directory and port, run as
    the `postgres` user), for tests that kill the database: the machine's server is
    shared by every checkout and is never stopped.

    `kill()` SIGKILLs the postmaster (its backends end with it, as after an OOM kill or a
    power cut); `start()` starts it again on the same directory and port, which recovers
    from its WAL as any crashed server does.
    """

    BINARIES = Path("/usr/lib/postgresql/15/bin")

    def __init__(self) -> None:
        self.directory = _directory_postgres_reaches()
        self.port = _free_port()
        self._server: subprocess.Popen[bytes] | None = None
        shutil.chown(self.directory, "postgres")
        self._as_postgres(str(self.BINARIES / "initdb"), "-D", str(self.data), "-A", "trust", "-U", "postgres")

    @property
    def data(self) -> Path:
        return self.directory / "data"

    @property
    def url(self) -> str:
        return f"postgresql+psycopg://postgres@127.0.0.1:{self.port}/postgres"

    def _as_postgres(self, *argv: str) -> None:
        subprocess.run(["runuser", "-u", "postgres", "--", *argv], check=True, capture_output=True)

    def start(self) -> None:
        """Start the server and wait until it accepts connections."""
        self._server = subprocess.Popen(
            ["runuser", "-u", "postgres", "--", str(self.BINARIES / "postgres"), "-D", str(self.data),
             "-p", str(self.port), "-k", str(self.directory), "-c", "listen_addresses=127.0.0.1", "-c", "fsync=off"],
            stdout=subprocess.DEVNULL, stderr=(self.directory / "server.log").open("ab"),
        )  # fmt: skip
        wait_for(self._accepts, 60, f"the test's PostgreSQL on port {self.port} to accept connections")

    def _accepts(self) -> bool:
        if self._server is not None and self._server.poll() is not None:
            log = (self.directory / "server.log").read_text(errors="replace")
            raise AssertionError(f"the test's PostgreSQL ended with {self._server.returncode}: {log[-2000:]}")
        probe = subprocess.run(
            [str(self.BINARIES / "pg_isready"), "-h", "127.0.0.1", "-p", str(self.port), "-q"], check=False
        )
        return probe.returncode == 0

    def kill(self) -> None:
        """SIGKILL the postmaster (found by its pid file: `runuser` is its parent) and
        wait for every backend to be gone, so nothing answers until `start()`."""
        pid = int((self.data / "postmaster.pid").read_text().split()[0])
        os.kill(pid, signal.SIGKILL)
        if self._server is not None:
            self._server.wait(30)
        wait_for(lambda: not self._backends_alive(), 30, "the killed PostgreSQL's backends to end")

    def _backends_alive(self) -> bool:
        with socket.socket() as probe:
            probe.settimeout(0.2)
            return probe.connect_ex(("127.0.0.1", self.port)) == 0

    def close(self) -> None:
        if self._server is not None and self._server.poll() is None:
            self.kill()
        shutil.rmtree(self.directory, ignore_errors=True)


@contextmanager
def own_postgres_or_skip() -> Iterator[OwnPostgres]:
    """A started `OwnPostgres`, removed afterwards; skips the test where it cannot be
    made (no PostgreSQL 15 binaries, not root)."""
    if not (OwnPostgres.BINARIES / "postgres").exists() or os.geteuid() != 0 or shutil.which("runuser") is None:
        pytest.skip("an own PostgreSQL needs root, runuser and " + str(OwnPostgres.BINARIES))
    server = OwnPostgres()
    try:
        server.start()
        yield server
    finally:
        server.close()


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])

"""The tests' PostgreSQL: a fresh database per test, or the test skipped where none runs.

The CI machine runs PostgreSQL, so nothing is skipped there; a laptop without one still
runs every SQLite test. A fresh database, never the shared one: migrating that to this
branch's schema would break every other checkout's tests on the machine.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import pytest

from tests.support.services import fresh_postgres_database, postgres_admin_url, reachable

__all__ = ["fresh_postgres_or_skip"]


@contextmanager
def fresh_postgres_or_skip() -> Iterator[str]:
    """The URL of a fresh PostgreSQL database, dropped afterwards; skips the test when
    PostgreSQL is not reachable."""
    if not reachable(postgres_admin_url()):
        pytest.skip("PostgreSQL is not reachable at " + postgres_admin_url())
    with fresh_postgres_database() as url:
        yield url

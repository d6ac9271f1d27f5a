"""The state store an agent under test wrote, opened for a test to read or arrange."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from coding_agent.store.state import StateStore

__all__ = ["agent_store"]


@contextmanager
def agent_store(directory: Path) -> Iterator[StateStore]:
    """The SQLite store of the agent set up in `directory` (`state.db`, as the tests'
    configs name it), closed when the block ends."""
    store = StateStore(f"sqlite:///{directory / 'state.db'}")
    try:
        yield store
    finally:
        store.close()

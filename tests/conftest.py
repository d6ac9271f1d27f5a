"""Suite-wide ordering: the long tests start first.

`./dev test` runs the suite on a few pytest-xdist workers that take tests one or two at a
time (`--dist load --maxschedchunk 1`). A test of a minute that starts last is the whole
run's tail; started first, the other workers finish the short tests around it. Tests of
tens of seconds carry `@pytest.mark.long` (registered in pyproject.toml); this hook moves
them to the front, in their collection order, and leaves everything else as collected.
Every xdist worker computes the same order, as xdist requires.
"""

from __future__ import annotations

import pytest


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    items.sort(key=lambda item: item.get_closest_marker("long") is None)

"""The daily budgets' day (SPEC 11.5): a UTC day, over the state store's real rows. A
task held late in the day is let go right after UTC midnight, with no one acting."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from datetime import datetime, timezone
from pathlib import Path

import pytest

from coding_agent.config import AgentConfig, parse_config
from coding_agent.redaction import Redactor
from coding_agent.runtime.budgets import Budgets
from coding_agent.store.state import StateStore

from ..postgres import fresh_postgres_or_skip

KEY = "github:acme/widgets#1"
OTHER_KEY = "github:acme/widgets#2"


class Clock:
    """The store's and the budgets' time, set by the test."""

    def __init__(self, at: datetime) -> None:
        self.now = at.timestamp()

    def __call__(self) -> float:
        return self.now

    def set(self, at: datetime) -> None:
        self.now = at.timestamp()


@pytest.fixture(params=["sqlite", "postgresql"])
def database_url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    """Both backends of the state store: the day's sums are SQL on each."""
    if request.param == "sqlite":
        yield f"sqlite:///{tmp_path / 'state.db'}"
    else:
        with fresh_postgres_or_skip() as url:
            yield url


def _config(url: str) -> AgentConfig:
    data = {
        "task_source": "github",
        "github": {"owner": "acme", "token": "t"},
        "llm": {"provider": "openai", "openai": {"model": "m", "api_key": "k"}},
        "database": {"url": url},
        "budget": {"per_requester": {"tokens_per_day": 100}},
    }
    return parse_config(data, env={})


def test_a_budget_used_up_late_in_the_day_lets_go_at_utc_midnight(database_url: str) -> None:
    clock = Clock(datetime(2026, 3, 1, 23, 0, tzinfo=timezone.utc))
    config = _config(database_url)
    store = StateStore(config.database.url, clock=clock)
    try:
        budgets = Budgets(config, store.spend, Redactor(), clock=clock)
        store.runs.start_run("run-1", KEY, "worker", "alice")
        store.runs.record_usage("run-1", KEY, 80, 30)

        clock.set(datetime(2026, 3, 1, 23, 59, 59, tzinfo=timezone.utc))
        held = budgets.overrun(OTHER_KEY, "alice", starting=True)
        assert held is not None and (held.used, held.limit, held.name) == (110, 100, "alice")
        assert held.resets_at == datetime(2026, 3, 2, tzinfo=timezone.utc) and held.day == "2026-03-01"
        assert budgets.overrun(OTHER_KEY, "bob", starting=True) is None, "another person's budget is their own"

        clock.set(datetime(2026, 3, 2, 0, 0, 1, tzinfo=timezone.utc))
        assert budgets.overrun(OTHER_KEY, "alice", starting=True) is None, "a new UTC day"
        today = budgets.usage(requesters=["alice"])
        assert today["requesters"]["alice"]["tokens_per_day"] == {
            "used": 0, "limit": 100, "left": 100, "resets_at": "2026-03-03T00:00:00+00:00",
        }  # fmt: skip
    finally:
        store.close()


def test_a_held_task_is_told_once_a_day(database_url: str) -> None:
    config = _config(database_url)
    store = StateStore(config.database.url)
    try:
        assert store.spend.note_budget_notice(KEY, "2026-03-01")
        assert not store.spend.note_budget_notice(KEY, "2026-03-01"), "once that day"
        assert store.spend.note_budget_notice(KEY, "2026-03-02"), "again the next day"
    finally:
        store.close()


CLAIMERS = 8


def test_claims_side_by_side_pass_a_runs_per_day_of_one_once(database_url: str) -> None:
    """Eight workers, each with its own engine (as eight processes have) and the lease of its
    own task, check and claim at once against `runs_per_day: 1`: exactly one claim passes,
    and the others see it (SPEC 15). The claim counts until its run is recorded (then the
    run does), and stops counting when its lease is handed back or runs out."""
    midnight = datetime(2026, 3, 1, tzinfo=timezone.utc).timestamp()
    clock = Clock(datetime(2026, 3, 1, 12, 0, tzinfo=timezone.utc))
    stores = [StateStore(database_url, clock=clock) for _ in range(CLAIMERS)]
    keys = [f"github:acme/widgets#{n + 1}" for n in range(CLAIMERS)]
    try:
        for n, (store, key) in enumerate(zip(stores, keys)):
            assert store.leases.acquire_lease(key, f"worker-{n}", 600)
        together = threading.Barrier(CLAIMERS)

        def claim(n: int) -> int | None:
            together.wait(30)
            return stores[n].spend.claim_run_start(keys[n], f"worker-{n}", "alice", 1, midnight)

        with ThreadPoolExecutor(CLAIMERS) as pool:
            results = list(pool.map(claim, range(CLAIMERS)))
        assert results.count(None) == 1, results
        assert sorted(results, key=str)[:-1] == [1] * (CLAIMERS - 1), "each refused claim saw the one that passed"
        winner = results.index(None)
        other = (winner + 1) % CLAIMERS
        store = stores[winner]

        store.runs.start_run("run-1", keys[winner], f"worker-{winner}", "alice")
        assert store.spend.claim_run_start(keys[other], f"worker-{other}", "alice", 1, midnight) == 1, "the run counts"
        assert store.spend.claim_run_start(keys[other], f"worker-{other}", "bob", 1, midnight) is None, "bob's own"
        assert store.spend.claim_run_start(keys[other], f"worker-{other}", "alice", 2, midnight) is None
        stores[other].leases.release_lease(keys[other], f"worker-{other}")
        third = (winner + 2) % CLAIMERS
        assert store.spend.claim_run_start(keys[third], f"worker-{third}", "alice", 2, midnight) is None, (
            "a claim handed back with its lease no longer counts"
        )
        clock.set(datetime(2026, 3, 2, 0, 0, 1, tzinfo=timezone.utc))
        tomorrow = datetime(2026, 3, 2, tzinfo=timezone.utc).timestamp()
        assert store.spend.claim_run_start(keys[other], f"worker-{other}", "alice", 1, tomorrow) is None, "a new day"
    finally:
        for store in stores:
            store.close()

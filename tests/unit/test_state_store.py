"""The state store's leases and accounting, on SQLite and (when reachable) PostgreSQL."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest

from coding_agent.store.followups import FollowUpRecords
from coding_agent.store.run_steering import KEEP_NUDGES_SECONDS
from coding_agent.store.state import StateStore

from ..postgres import fresh_postgres_or_skip


class FakeClock:
    """An injectable clock, so lease expiry is tested without waiting."""

    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
def store(tmp_path: Path, clock: FakeClock) -> Iterator[StateStore]:
    state = StateStore(f"sqlite:///{tmp_path}/state.db", clock=clock)
    yield state
    state.close()


def test_lease_is_exclusive_until_released(store: StateStore) -> None:
    assert store.leases.acquire_lease("github:a/b#1", "w1", 60)
    assert not store.leases.acquire_lease("github:a/b#1", "w2", 60)
    assert not store.leases.acquire_lease("github:a/b#1", "w1", 60), "not even by its holder: a run of its own holds it"
    store.leases.release_lease("github:a/b#1", "w2")
    assert store.leases.lease_owner("github:a/b#1") == "w1", "only the owner releases"
    store.leases.release_lease("github:a/b#1", "w1")
    assert store.leases.acquire_lease("github:a/b#1", "w2", 60)


def test_expired_lease_is_taken_over(store: StateStore, clock: FakeClock) -> None:
    assert store.leases.acquire_lease("k", "crashed", 60)
    clock.now += 61
    assert store.leases.lease_owner("k") is None
    assert store.leases.acquire_lease("k", "w2", 60)
    assert not store.leases.renew_lease("k", "crashed", 60), "the old owner learns it lost the lease"
    assert store.leases.renew_lease("k", "w2", 60)


def test_a_lease_of_this_process_is_not_taken_here_again_once_run_out(store: StateStore, clock: FakeClock) -> None:
    """A claim whose forge reads outlast a short lease: another claim path of the same
    process (a review thread of the task's PR, say) must not take that lease as run out,
    find nothing to do, and hand it back from under the claim's run. Another process may;
    once let go (or lost to another worker) it is free here again."""
    assert store.leases.acquire_lease("k", "this-process", 2)
    clock.now += 3
    assert not store.leases.acquire_lease("k", "this-process", 2), "its claim still stands for it"
    assert store.runs.start_run("run-1", "k", "this-process", None, lease_seconds=2), "the claim's run starts"
    store.runs.finish_run("run-1", "done", 1)
    store.leases.release_lease("k", "this-process")
    assert store.leases.acquire_lease("k", "this-process", 2), "let go: free here again"
    clock.now += 3
    assert store.leases.acquire_lease("k", "another-process", 2)
    assert not store.runs.heartbeat("k", "this-process", 2, "run-1", 1), "the old holder learns it lost the lease"
    store.leases.release_lease("k", "another-process")
    assert store.leases.acquire_lease("k", "this-process", 2), "lost to another worker: free here again"
    clock.now += 3
    store.leases.let_go("k", "this-process")  # its run ended without releasing it (an internal error)
    assert store.leases.acquire_lease("k", "this-process", 2), "run out and no run of ours stands for it"


def test_two_stores_on_one_file_share_leases(tmp_path: Path) -> None:
    first = StateStore(f"sqlite:///{tmp_path}/shared.db")
    second = StateStore(f"sqlite:///{tmp_path}/shared.db")
    try:
        assert first.leases.acquire_lease("k", "a", 60)
        assert not second.leases.acquire_lease("k", "b", 60)
    finally:
        first.close()
        second.close()


def test_runs_and_usage(store: StateStore) -> None:
    store.runs.start_run("u1", "github:a/b#1", "w1", "alice")
    store.runs.record_usage("u1", "github:a/b#1", 100, 20)
    store.runs.record_usage("u1", "github:a/b#1", 50, 5)
    store.runs.finish_run("u1", "done", 3)
    [run] = store.runs.all("github:a/b#1")
    assert (run.status, run.steps, run.prompt_tokens, run.completion_tokens, run.requester) == ("done", 3, 150, 25, "alice")
    assert store.runs.token_totals() == {"github:a/b#1": (150, 25)}


def test_trigger_rejection_is_remembered_per_update(store: StateStore) -> None:
    assert not store.rejections.trigger_rejected("k", "t1")
    store.rejections.reject_trigger("k", "t1")
    assert store.rejections.trigger_rejected("k", "t1")
    assert not store.rejections.trigger_rejected("k", "t2"), "a change to the task re-opens the check"


@contextmanager
def _postgres_store(clock: FakeClock) -> Iterator[StateStore]:
    """A store on a fresh PostgreSQL database."""
    try:
        import psycopg  # noqa: F401
    except ImportError:
        pytest.skip("psycopg is not installed")
    with fresh_postgres_or_skip() as url:
        store = StateStore(url, clock=clock)
        try:
            yield store
        finally:
            store.close()


def test_postgres_leases(clock: FakeClock) -> None:
    with _postgres_store(clock) as store:
        key = "github:pg/test#1"
        assert store.leases.acquire_lease(key, "a", 60)
        assert not store.leases.acquire_lease(key, "b", 60)
        clock.now += 61
        assert store.leases.acquire_lease(key, "b", 60)
        store.leases.release_lease(key, "b")


# -- steering: pause/resume, takeover, operator requests, final comment guard ------------


def test_a_paused_run_is_claimed_once(tmp_path: Path, store: StateStore, clock: FakeClock) -> None:
    store.runs.start_run("r1", "k", "w1", None)
    store.steering.pause_run("r1", 3, hold=False)
    other = StateStore(f"sqlite:///{tmp_path}/state.db", clock=clock)
    try:
        assert [run.uuid for run in store.steering.resumable_runs()] == ["r1"]
        wins = [store.runs.claim_run("r1", "w2", "paused"), other.runs.claim_run("r1", "w3", "paused")]
    finally:
        other.close()
    assert wins == [True, False]
    [run] = store.runs.all()
    assert run.status == "running" and run.owner == "w2" and run.steps == 3
    assert store.steering.resumable_runs() == []


def test_a_held_pause_waits_for_release(store: StateStore) -> None:
    store.runs.start_run("r1", "k1", "w", None)
    store.runs.start_run("r2", "k2", "w", None)
    store.steering.pause_run("r1", 1, hold=True)
    store.steering.pause_run("r2", 1, hold=True)
    assert store.steering.resumable_runs() == []
    assert store.steering.release_holds("k1") == 1
    assert [run.task_key for run in store.steering.resumable_runs()] == ["k1"]
    assert store.steering.release_holds() == 1
    assert len(store.steering.resumable_runs()) == 2


def test_orphans_are_expired_leases_and_running_runs_without_a_lease(store: StateStore, clock: FakeClock) -> None:
    store.leases.acquire_lease("crashed", "dead", 10)
    store.leases.acquire_lease("alive", "w", 100)
    store.runs.start_run("r-alive", "alive", "w", None)
    store.runs.start_run("r-lost", "lost", "dead", None)  # its expired lease was taken and released by an intake
    clock.now += 50
    assert sorted(store.runs.orphaned_tasks()) == ["crashed", "lost"]


def _check_a_run_starts_and_is_abandoned_only_under_its_own_lease(store: StateStore, clock: FakeClock) -> None:
    assert store.leases.acquire_lease("k", "stalled", 10)
    clock.now += 11  # the stalled worker's claim outlasted its lease
    assert store.leases.acquire_lease("k", "other", 10)
    assert not store.runs.start_run("late", "k", "stalled", None, 10), "a claim whose lease was taken starts no run"
    assert store.runs.start_run("fresh", "k", "other", None, 10)
    assert store.leases.live_lease("k") == ("other", 10), "renewed as the run was recorded"
    assert [run.uuid for run in store.runs.all("k")] == ["fresh"]

    store.runs.start_run("lost", "k", "stalled", None)  # recorded before its lease was taken
    store.runs.claim_run("fresh", "taker", "running")  # taken over: the row is the taker's now
    assert not store.runs.abandon_own_run("fresh", "other", 4, "lease lost"), "another's row is left alone"
    assert store.runs.abandon_own_run("lost", "stalled", 4, "lease lost")
    assert not store.runs.abandon_own_run("lost", "stalled", 5, "lease lost"), "closed once"
    assert {run.uuid: (run.status, run.steps) for run in store.runs.all("k")} == {
        "fresh": ("running", 0),
        "lost": ("abandoned", 4),
    }


def test_a_run_starts_and_is_abandoned_only_under_its_own_lease_sqlite(store: StateStore, clock: FakeClock) -> None:
    _check_a_run_starts_and_is_abandoned_only_under_its_own_lease(store, clock)


def test_a_run_starts_and_is_abandoned_only_under_its_own_lease_postgres(clock: FakeClock) -> None:
    with _postgres_store(clock) as store:
        _check_a_run_starts_and_is_abandoned_only_under_its_own_lease(store, clock)


def test_operator_requests_and_final_marks(store: StateStore) -> None:
    store.steering.request_control("k", "stop")
    store.steering.request_control("k", "pause")
    assert store.steering.control_request("k") == "stop", "a stop is never downgraded to a pause"
    store.steering.clear_control_request("k")
    assert store.steering.control_request("k") is None

    store.steering.record_final("r", "done", "first")
    store.steering.record_final("r", "failed", "second")
    marks = store.steering.run_marks("r")
    assert (marks.final_status, marks.final_body, marks.final_posted) == ("done", "first", False)
    store.steering.mark_final_posted("r")
    store.steering.set_progress_comment("r", "55")
    marks = store.steering.run_marks("r")
    assert marks.final_posted and marks.progress_comment_id == "55"


def _check_nudges(store: StateStore, clock: FakeClock) -> None:
    assert store.steering.steering_requests("k") == (None, None)
    store.steering.nudge_run("k")
    request, first = store.steering.steering_requests("k")
    assert request is None and first is not None
    assert store.steering.steering_requests("k") == (None, first), "reading does not consume it"
    store.steering.request_control("k", "pause")
    store.steering.nudge_run("k")
    request, second = store.steering.steering_requests("k")
    assert request == "pause" and second not in (None, first), "every nudge is a new token, beside the request"
    assert store.steering.control_request("k") == "pause", "a nudge is not an operator request"
    store.steering.nudge_run("other")
    clock.now += KEEP_NUDGES_SECONDS + 1
    store.steering.nudge_run("other")
    assert store.steering.steering_requests("k") == ("pause", None), "old nudges are pruned"
    assert store.steering.steering_requests("other")[1] is not None


def test_webhook_nudges_sqlite(store: StateStore, clock: FakeClock) -> None:
    _check_nudges(store, clock)


def test_webhook_nudges_postgres(clock: FakeClock) -> None:
    with _postgres_store(clock) as store:
        _check_nudges(store, clock)


def test_heartbeat_renews_and_records_steps_in_one_go(store: StateStore, clock: FakeClock) -> None:
    store.runs.start_run("u1", "k", "w1", None)
    assert store.leases.acquire_lease("k", "w1", 60)
    clock.now += 50
    assert store.runs.heartbeat("k", "w1", 60, "u1", steps=4)
    clock.now += 50
    assert store.leases.lease_owner("k") == "w1", "the heartbeat extended the lease"
    assert store.runs.all("k")[0].steps == 4
    clock.now += 61
    assert store.leases.acquire_lease("k", "w2", 60)
    assert not store.runs.heartbeat("k", "w1", 60, "u1", steps=5), "a lost lease is reported"


def test_examined_answers_for_every_candidate_of_a_large_poll(store: StateStore, clock: FakeClock) -> None:
    """1,300 candidates (more than one read's worth of keys, the last read a partial one):
    exactly those examined at the `updated_at` they carry now are unchanged."""
    records = FollowUpRecords(store.engine, clock=clock)
    stamp = datetime(2026, 1, 1, tzinfo=timezone.utc)
    clock.now = stamp.timestamp() + 60
    keys = [f"github:acme/w#{number}" for number in range(1, 1301)]
    for number, key in enumerate(keys, start=1):
        if number % 3 == 0:
            records.mark_seen(key, stamp)
        elif number % 3 == 1:
            records.mark_seen(key, stamp - timedelta(minutes=1))  # examined before its last change

    unchanged = records.examined([(key, stamp) for key in keys])

    assert unchanged == {key for number, key in enumerate(keys, start=1) if number % 3 == 0}
    assert records.examined([]) == set()

"""The pause triggers (SPEC 8.3): signal file, operator request, shutdown; and how often
the operator's requests are read from the state store (injected clock, no waiting)."""

from __future__ import annotations

import asyncio
from pathlib import Path

from coding_agent.agent.steering.interrupts import REQUEST_READ_SECONDS, PauseWatch, ShutdownSignal


class Requests:
    """The state store's answer for one task, counting the reads."""

    def __init__(self) -> None:
        self.kind: str | None = None
        self.reads = 0

    def __call__(self) -> str | None:
        self.reads += 1
        return self.kind


class Clock:
    def __init__(self) -> None:
        self.now = 50.0

    def __call__(self) -> float:
        return self.now


def _watch(tmp_path: Path, requests: Requests, shutdown: ShutdownSignal, enabled: bool = True) -> PauseWatch:
    return PauseWatch(enabled, tmp_path / "pause_signal", shutdown, requests, clock=Clock())


def test_each_trigger_and_whether_it_waits_for_resume(tmp_path: Path) -> None:
    requests, shutdown = Requests(), ShutdownSignal()
    watch = _watch(tmp_path, requests, shutdown)
    assert watch.pause_for(None) is None

    shutdown.set()
    paused = watch.pause_for(None)
    assert paused is not None and (paused.reason, paused.hold) == ("shutdown", False)

    (tmp_path / "pause_signal").touch()
    paused = watch.pause_for(None)
    assert paused is not None and (paused.reason, paused.hold) == ("signal", False)

    paused = watch.pause_for("pause")
    assert paused is not None and (paused.reason, paused.hold) == ("operator", True), "the operator's own pause holds"
    (tmp_path / "pause_signal").unlink()
    quiet = _watch(tmp_path, Requests(), ShutdownSignal())
    assert quiet.pause_for("stop") is None, "a stop request is the stop phase's business"


def test_disabled_never_pauses(tmp_path: Path) -> None:
    shutdown = ShutdownSignal()
    shutdown.set()
    (tmp_path / "pause_signal").touch()
    assert _watch(tmp_path, Requests(), shutdown, enabled=False).pause_for("pause") is None


async def test_operator_requests_are_read_at_most_once_per_interval(tmp_path: Path) -> None:
    requests, clock = Requests(), Clock()
    watch = PauseWatch(True, tmp_path / "pause_signal", ShutdownSignal(), requests, clock=clock)
    assert await watch.operator_request() is None and requests.reads == 1
    requests.kind = "pause"
    clock.now += REQUEST_READ_SECONDS / 2
    assert await watch.operator_request() is None and requests.reads == 1, "a checkpoint moments later reuses the read"
    clock.now += REQUEST_READ_SECONDS / 2
    assert await watch.operator_request() == "pause" and requests.reads == 2


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_a_shutdown_s_writes_are_bounded_by_what_is_left_of_its_time() -> None:
    """SPEC 8.3: a forge that does not answer cannot hold a shutting-down pause up."""
    clock = Clock()
    shutdown = ShutdownSignal(clock)
    assert shutdown.remaining() is None, "no shutdown: no bound"
    shutdown.begin(grace=8, finish=3)
    assert shutdown.is_set() and not shutdown.is_cut()
    clock.now += 10.9
    assert round(shutdown.remaining() or 0, 3) == 0.1

    async def silent_forge() -> str:
        await asyncio.Event().wait()
        return "never"

    async def quick() -> str:
        return "written"

    async def both() -> tuple[str | None, str | None]:
        return await shutdown.bounded(silent_forge(), "a comment"), await shutdown.bounded(quick(), "a label")

    assert asyncio.run(asyncio.wait_for(both(), 5)) == (None, "written")


def test_a_cut_reaches_waiters_in_any_event_loop_and_later_ones_at_once() -> None:
    """A service may outlive one `asyncio.run` (tests, `resume`): its signal is not bound to one loop."""
    shutdown = ShutdownSignal()

    async def cut_while_waiting() -> None:
        waiting = asyncio.create_task(shutdown.wait_cut())
        await asyncio.sleep(0)
        assert not waiting.done()
        shutdown.cut()
        await asyncio.wait_for(waiting, 5)

    asyncio.run(cut_while_waiting())
    asyncio.run(asyncio.wait_for(shutdown.wait_cut(), 5))  # another loop, after the cut
    assert shutdown.is_cut() and shutdown.is_set()

"""When the stop check re-reads the assignees (seed 002 6.5), against a sandbox GitHub.

The clock is injected: `min_check_interval_seconds` is tested without waiting.
"""

from __future__ import annotations

from coding_agent.config import TaskStopConfig
from coding_agent.agent.steering.interrupts import StopChecker

from ._steering_forge import BOT, REPO, forge


class FakeClock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def _checker(source, key, clock: FakeClock, assigned: bool = True, **settings: float) -> StopChecker:  # type: ignore[no-untyped-def]
    config = TaskStopConfig(**{"check_interval": 1, "min_check_interval_seconds": 0, **settings})
    return StopChecker(source, key, BOT, config, initially_assigned=assigned, clock=clock)


async def test_every_n_iterations_starting_with_the_first() -> None:
    async with forge() as f:
        checker = _checker(f.source, f.key, FakeClock(), check_interval=3)
        f.clear()
        read_at = []
        for iteration in range(1, 11):
            before = checker.reads
            assert not await checker.bot_unassigned(iteration), "the bot is still assigned"
            if checker.reads > before:
                read_at.append(iteration)
        assert read_at == [1, 4, 7, 10]
        assert f.reads_of(f"/repos/{REPO}/issues/{f.number}") == 4, "each check is one real read"


async def test_check_interval_zero_never_reads() -> None:
    async with forge() as f:
        checker = _checker(f.source, f.key, FakeClock(), check_interval=0)
        f.sandbox.state.unassign(REPO, f.number, BOT, actor="alice")
        f.clear()
        assert not any([await checker.bot_unassigned(it) for it in range(1, 6)])
        assert f.reads_of(f"/repos/{REPO}/issues/{f.number}") == 0


async def test_min_interval_is_respected_but_the_first_check_always_runs() -> None:
    clock = FakeClock()
    async with forge() as f:
        checker = _checker(f.source, f.key, clock, min_check_interval_seconds=30)
        assert not await checker.bot_unassigned(1) and checker.reads == 1, "the first check runs at once"
        f.sandbox.state.unassign(REPO, f.number, BOT, actor="alice")
        clock.now += 29.9
        assert not await checker.bot_unassigned(2) and checker.reads == 1, "too soon: no read, no stop"
        clock.now += 0.1
        assert await checker.bot_unassigned(3) and checker.reads == 2, "30 s later the unassign is seen"


async def test_only_a_bot_that_was_assigned_can_be_unassigned() -> None:
    async with forge(assigned=False) as f:
        checker = _checker(f.source, f.key, FakeClock(), assigned=False)
        assert not await checker.bot_unassigned(1), "a label-triggered task without assignees goes on"
        f.sandbox.state.assign(REPO, f.number, BOT, actor="alice")
        assert not await checker.bot_unassigned(2) and checker.armed
        f.sandbox.state.unassign(REPO, f.number, BOT, actor="alice")
        assert await checker.bot_unassigned(3)


async def test_an_unchanged_assignee_list_costs_a_304() -> None:
    async with forge() as f:
        checker = _checker(f.source, f.key, FakeClock())
        await checker.bot_unassigned(1)
        f.clear()
        await checker.bot_unassigned(2)
        [request] = f.sandbox.state.requests()
        assert request.status == 304 and not f.sandbox.state.counted_requests()

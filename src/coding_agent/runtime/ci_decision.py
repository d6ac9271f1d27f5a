"""What a CI watch (SPEC 16) does next, decided from what it knows: a pure function, so
every branch is a unit test and the driver (`ci_watch.py`) only carries the decision out.

The order of the questions is the spec's: nothing yet (wait, or no CI at all after
`ci.appear_seconds`), still running (wait, or stop with a note after `ci.watch_seconds`),
all passed (report it, flaky when it took a re-run), something failed (re-run once with
`ci.rerun_flaky`, else a fix run while attempts are left, else give up with one comment).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from coding_agent.config import CiConfig
from coding_agent.domain.ci import Check, CheckState, CiReport, CiWatch, WatchState

__all__ = ["CiAction", "CiDecision", "decide"]

CiAction = Literal["wait", "no_ci", "timed_out", "passed", "rerun", "fix", "give_up"]


@dataclass(frozen=True)
class CiDecision:
    """One action; `checks`: the failing checks it is about (re-run, fix, give up)."""

    action: CiAction
    checks: tuple[Check, ...] = ()
    total: int = 0  # checks of the commit (for "CI passed: N checks")
    flaky: bool = False  # passed only after the failed checks ran again


def decide(watch: CiWatch, report: CiReport, now: float, config: CiConfig) -> CiDecision:
    """The one thing to do about `watch`, given its commit's `report` read at `now`.

    Only a watch in WATCHING or RERUN is decided about: a fix to start or running has its
    own course (its claim, its run's end), and an ended watch does nothing.
    """
    if watch.state not in (WatchState.WATCHING, WatchState.RERUN):
        return CiDecision("wait")
    waited = now - watch.started_at
    state = report.state
    if state is None:
        return CiDecision("no_ci" if waited >= config.appear_seconds else "wait")
    if state is CheckState.PENDING:
        return CiDecision("timed_out" if waited >= config.watch_seconds else "wait")
    total = len(report.checks)
    if state is CheckState.PASSED:
        return CiDecision("passed", total=total, flaky=watch.reran)
    failed = report.failed
    if watch.state is WatchState.RERUN and now - watch.acted_at < config.appear_seconds:
        # The forge may still show the failures the re-run was asked for: wait to see the
        # checks run again (the driver then sets the watch back to WATCHING).
        return CiDecision("wait")
    rerunnable = tuple(check for check in failed if check.rerun_id is not None)
    if config.rerun_flaky and not watch.reran and rerunnable:
        return CiDecision("rerun", rerunnable, total)
    if watch.attempts < config.max_fix_attempts:
        return CiDecision("fix", failed, total)
    return CiDecision("give_up", failed, total)

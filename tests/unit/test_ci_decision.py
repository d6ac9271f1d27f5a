"""The CI watch's decision (SPEC 16), every branch: a pure function of the watch, the
commit's checks, the time and `ci`."""

from __future__ import annotations

from dataclasses import replace

import pytest
from hypothesis import given
from hypothesis import strategies as st

from coding_agent.config import CiConfig
from coding_agent.domain.ci import Check, CheckKind, CheckState, CiReport, CiWatch, WatchState
from coding_agent.runtime.ci_decision import decide

START = 1_000_000.0
CONFIG = CiConfig(enabled=True)  # appear 300 s, watch 3600 s, 2 fix attempts, no re-run


def check(name: str, state: CheckState, rerun: str | None = "run-1") -> Check:
    conclusion = {CheckState.PENDING: "in_progress", CheckState.PASSED: "success", CheckState.FAILED: "failure"}[state]
    return Check(name, name, CheckKind.GITHUB_ACTIONS_JOB, state, conclusion, f"https://ci/{name}", rerun)


def report(*checks: Check) -> CiReport:
    return CiReport("owner/repo", "a" * 40, checks)


def watch(**changes: object) -> CiWatch:
    key, branch = "github:owner/repo#1", "coding-agent/1-x"
    base = CiWatch(key, "owner/repo", 2, branch, "a" * 40, WatchState.WATCHING, START, START)
    return replace(base, **changes)


PASS = check("lint", CheckState.PASSED)
FAIL = check("tests", CheckState.FAILED)
PEND = check("build", CheckState.PENDING)


def test_nothing_appeared_yet_waits() -> None:
    assert decide(watch(), report(), START + 299, CONFIG).action == "wait"


def test_nothing_appeared_within_appear_seconds_gives_up_silently() -> None:
    assert decide(watch(), report(), START + 300, CONFIG).action == "no_ci"


def test_pending_waits_until_watch_seconds() -> None:
    assert decide(watch(), report(PASS, PEND), START + 3599, CONFIG).action == "wait"
    assert decide(watch(), report(PASS, PEND), START + 3600, CONFIG).action == "timed_out"


def test_pending_with_a_failure_already_waits_for_all_to_finish() -> None:
    assert decide(watch(), report(FAIL, PEND), START + 10, CONFIG).action == "wait"


def test_appeared_after_appear_seconds_is_still_watched() -> None:
    assert decide(watch(), report(PEND), START + 1000, CONFIG).action == "wait"


def test_all_passed_reports_the_number_of_checks() -> None:
    decision = decide(watch(), report(PASS, check("tests", CheckState.PASSED)), START + 5, CONFIG)
    assert (decision.action, decision.total, decision.flaky) == ("passed", 2, False)


def test_a_pass_after_a_rerun_is_flaky() -> None:
    decision = decide(watch(reran=True, state=WatchState.RERUN), report(PASS), START + 5, CONFIG)
    assert (decision.action, decision.flaky) == ("passed", True)


def test_a_failure_starts_a_fix_run_while_attempts_are_left() -> None:
    decision = decide(watch(attempts=1), report(PASS, FAIL), START + 5, CONFIG)
    assert (decision.action, decision.checks, decision.total) == ("fix", (FAIL,), 2)


def test_a_failure_with_no_attempt_left_gives_up_listing_the_failures() -> None:
    decision = decide(watch(attempts=2), report(PASS, FAIL), START + 5, CONFIG)
    assert (decision.action, decision.checks) == ("give_up", (FAIL,))


def test_no_fix_attempts_at_all_gives_up_at_once() -> None:
    assert decide(watch(), report(FAIL), START + 5, CiConfig(enabled=True, max_fix_attempts=0)).action == "give_up"


def test_rerun_flaky_reruns_the_rerunnable_failures_once() -> None:
    config = CiConfig(enabled=True, rerun_flaky=True)
    other = check("status", CheckState.FAILED, rerun=None)
    decision = decide(watch(), report(FAIL, other), START + 5, config)
    assert (decision.action, decision.checks) == ("rerun", (FAIL,))
    assert decide(watch(reran=True), report(FAIL, other), START + 5, config).action == "fix"


def test_rerun_flaky_without_anything_rerunnable_goes_to_a_fix() -> None:
    config = CiConfig(enabled=True, rerun_flaky=True)
    assert decide(watch(), report(check("status", CheckState.FAILED, None)), START + 5, config).action == "fix"


def test_right_after_a_rerun_the_old_failures_are_waited_out() -> None:
    config = CiConfig(enabled=True, rerun_flaky=True)
    rerun = watch(state=WatchState.RERUN, reran=True, acted_at=START + 10)
    assert decide(rerun, report(FAIL), START + 10 + 299, config).action == "wait"
    assert decide(rerun, report(FAIL), START + 10 + 300, config).action == "fix"
    assert decide(rerun, report(PEND), START + 20, config).action == "wait"


@pytest.mark.parametrize(
    "state",
    [WatchState.FIX, WatchState.FIXING, WatchState.PASSED, WatchState.FAILED, WatchState.ENDED, WatchState.NO_CI],
)
def test_a_watch_not_waiting_on_ci_is_never_acted_on(state: WatchState) -> None:
    assert decide(watch(state=state), report(FAIL), START + 10_000, CONFIG).action == "wait"


_states = st.sampled_from(list(CheckState))


@given(
    states=st.lists(_states, max_size=5),
    waited=st.floats(min_value=0, max_value=10_000),
    attempts=st.integers(min_value=0, max_value=5),
    reran=st.booleans(),
    rerun_flaky=st.booleans(),
    max_attempts=st.integers(min_value=0, max_value=3),
)
def test_decisions_keep_the_limits(
    states: list[CheckState], waited: float, attempts: int, reran: bool, rerun_flaky: bool, max_attempts: int
) -> None:
    """Whatever the checks: never a fix past the attempts, never a second re-run, never an
    action while something still runs before the deadline, and failures named."""
    config = CiConfig(enabled=True, rerun_flaky=rerun_flaky, max_fix_attempts=max_attempts)
    checks = tuple(check(f"c{i}", state) for i, state in enumerate(states))
    decision = decide(watch(attempts=attempts, reran=reran), report(*checks), START + waited, config)
    if decision.action == "fix":
        assert attempts < max_attempts
    if decision.action == "rerun":
        assert rerun_flaky and not reran
    if CheckState.PENDING in states and waited < config.watch_seconds:
        assert decision.action == "wait"
    if decision.action in ("fix", "give_up", "rerun"):
        assert decision.checks and all(c.state is CheckState.FAILED for c in decision.checks)
    if not states:
        assert decision.action in ("wait", "no_ci")


def test_ci_config_defaults_follow_the_spec() -> None:
    config = CiConfig()
    timing = (config.appear_seconds, config.watch_seconds)
    assert (config.enabled, timing, config.max_fix_attempts) == (False, (300, 3600), 2)
    assert (config.log_tail_lines, config.ready_when_green, config.rerun_flaky) == (200, False, False)


def test_ci_config_refuses_a_watch_shorter_than_the_appearance_wait() -> None:
    with pytest.raises(ValueError, match="watch_seconds"):
        CiConfig(appear_seconds=600, watch_seconds=60)


def test_checks_survive_the_store_s_json() -> None:
    from coding_agent.domain.ci import checks_from_json, checks_to_json

    assert checks_from_json(checks_to_json((FAIL, PASS))) == (FAIL, PASS)
    assert checks_from_json("not json") == ()


@pytest.mark.parametrize(
    ("state", "attempts", "shown"),
    [
        (WatchState.WATCHING, 0, "waiting"),
        (WatchState.WATCHING, 1, "waiting (1/2 fix attempts)"),
        (WatchState.FIXING, 1, "fixing (1/2 fix attempts)"),
        (WatchState.PASSED, 1, "passed"),
        (WatchState.FLAKY, 0, "passed (flaky)"),
        (WatchState.FAILED, 2, "failed (2/2 fix attempts)"),
        (WatchState.NO_CI, 0, "no CI"),
        (WatchState.TIMED_OUT, 0, "timed out"),
        (WatchState.ENDED, 0, "ended"),
    ],
)
def test_the_ci_state_as_status_and_the_dashboard_show_it(state: WatchState, attempts: int, shown: str) -> None:
    assert watch(state=state, attempts=attempts, max_attempts=2).shown == shown

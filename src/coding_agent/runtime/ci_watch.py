"""CI feedback (SPEC 16): the watch of the head commit a run pushed to its PR/MR, carried
out. `ci_decision.decide` says what to do; this module reads what it needs and does it.

- Started by the worker when a run ends done having pushed to a PR/MR branch
  (`after_run`); a newer push replaces the task's watch, so only the newest head is
  watched. A CI fix run's own end moves its watch on: its push is watched with one more
  attempt used, a fix that changed nothing says what still fails. A fix run whose end
  never reached its watch (its worker died as it ended; a takeover that published the
  end again knows no push) is moved on from the PR/MR's head: moved by the fix, it is
  watched; unmoved, the fix changed nothing (`_recover`, at a poll, once the run ended
  and no worker holds the task).
- Driven by each producer poll (`poll`: one `ci_report` per live watch) and, at once, by
  a CI webhook about its commit (`hint`). A watch is acted on only under its task's
  lease, so two workers never act on one watch, and a run of the task (a follow-up)
  keeps the watch waiting until it ends.
- Before acting (never at every poll, so a poll stays one request) the task and the
  PR/MR are read: a push by someone else, a stop (stop label, unassign), a closed or
  merged PR/MR end the watch; a pause holds it.
- A fix run is claimed through the follow-up claim (`claim_fix`, asked by
  `FollowUpIntake`): the label swap done -> processing, the run answering where the task's
  runs answer, its first turn listing the failing checks with their logs' tails.

Every forge call here is through `Source`; the state is the store's (`CiWatches`).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, replace
from typing import Literal

from sqlalchemy.exc import OperationalError

from coding_agent.agent.markdown import inert_line
from coding_agent.agent.runner import RunResult
from coding_agent.agent.steering import pause_signal_path
from coding_agent.config import AgentConfig
from coding_agent.domain.ci import Check, CheckState, CiFix, CiReport, CiWatch, FailingCheck, WatchState
from coding_agent.domain.tasks import Task, TaskKey, TaskKind, ThreadRef
from coding_agent.errors import AgentError, QueueUnavailable
from coding_agent.prompts.notices import notice
from coding_agent.redaction import Redactor
from coding_agent.runtime.budgets import Budgets
from coding_agent.runtime.ci_decision import CiDecision, decide
from coding_agent.runtime.intake import Claim, ReviewClaim
from coding_agent.sources.base import Source
from coding_agent.sources.lifecycle import lifecycle_labels, transition
from coding_agent.store.state import StateStore

__all__ = ["CiWatcher", "CiFixClaim", "Offer"]

log = logging.getLogger(__name__)

# What of a check's name, conclusion and URL a comment shows (one line each).
_NAME_CHARS, _CONCLUSION_CHARS, _URL_CHARS = 200, 50, 500

# Enqueue a task key for a (CI fix) follow-up run; False when it is queued or running.
Offer = Callable[[str], Awaitable[bool]]


@dataclass(frozen=True)
class CiFixClaim(ReviewClaim):
    """A CI fix run claimed: it answers in `reply_to` (None: on the task) and starts from
    the failing checks of `ci_fix`."""

    ci_fix: CiFix | None = None


def _change_key(task_key: str, watch: CiWatch) -> TaskKey:
    return TaskKey(TaskKey.parse(task_key).forge, watch.project, TaskKind.CHANGE, watch.number)


class CiWatcher:
    """The CI watches of one process's sources, over the state store."""

    def __init__(
        self,
        config: AgentConfig,
        store: StateStore,
        sources: list[Source],
        owner: str,
        redactor: Redactor,
        budgets: Budgets | None = None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self._config = config
        self._settings = config.ci
        self._store = store
        self._watches = store.ci_watches
        self._sources = sources
        self._owner = owner
        self._redactor = redactor
        self._budgets = budgets
        self._clock = clock
        self._signal_file = pause_signal_path(config) if config.pause_resume.enabled else None
        self._background: set[asyncio.Task[None]] = set()

    @property
    def enabled(self) -> bool:
        return self._settings.enabled

    # -- started and moved on by runs' ends (the worker) -----------------------------

    async def after_run(self, source: Source, claim: Claim, result: RunResult) -> None:
        """A run of `claim.task` ended as `result`: watch its push, or end a fix's watch.
        Never raises: the run is over whatever happens to its watch."""
        if not self.enabled or result.status == "paused":
            return
        try:
            await self._after_run(source, claim, result)
        except Exception:
            log.exception("%s: the CI watch of this run's push could not be started", claim.task.key)

    async def _after_run(self, source: Source, claim: Claim, result: RunResult) -> None:
        key = str(claim.task.key)
        previous = await asyncio.to_thread(self._watches.watch, key)
        if previous is None or previous.state is not WatchState.FIXING:
            if result.status == "done" and result.pushed is not None:
                await self._start(source, claim, result, None)
            return
        # A fix run's end, under the task's lease: a poll's `_recover` may be moving the
        # same watch on (the run's lease is free once its end is out).
        if not await self._lease(key):
            log.info("%s: the CI watch of this fix run is moved on by a poll", key)
            return
        try:
            watch = await asyncio.to_thread(self._watches.watch, key)
            if watch is None or watch.state is not WatchState.FIXING:
                return  # a poll moved it on meanwhile
            if result.status == "done" and result.pushed is not None:
                await self._start(source, claim, result, watch)
            else:
                # A fix run this worker ran from its claim knows it pushed nothing; a
                # taken-over one (its end published again) does not know what its dead
                # worker pushed.
                await self._fix_ended(source, watch, result.status, known=isinstance(claim, CiFixClaim))
        finally:
            await asyncio.to_thread(self._store.leases.release_lease, key, self._owner)

    async def _fix_ended(self, source: Source, watch: CiWatch, status: str, known: bool) -> None:
        """The fix run of `watch` ended `status` without a push it knows of (`known`: it
        knows it pushed nothing; else the PR/MR's head says whether it pushed)."""
        key, update = watch.task_key, self._watches.update_watch
        if status in ("failed", "stopped"):  # it said so itself
            await asyncio.to_thread(update, watch, state=WatchState.ENDED, acted_at=self._clock())
            return
        if status != "done":
            return  # its end is still to be published or its run continued: that moves it on
        if not known:
            change = await source.find_open_change(watch.project, watch.head_branch)
            if change is None or change.number != watch.number:
                log.info("%s: its PR/MR is closed or merged; its CI watch ends", key)
                await asyncio.to_thread(update, watch, state=WatchState.ENDED, acted_at=self._clock())
                return
            if change.head_sha is not None and change.head_sha != watch.sha:
                await self._watch_pushed(watch, change.head_sha)
                return
        await asyncio.to_thread(update, watch, state=WatchState.FAILED, acted_at=self._clock())
        await self._comment(source, key, watch, "ci_unchanged", checks=self._listing(watch.failing))

    async def _watch_pushed(self, fixed: CiWatch, sha: str) -> None:
        """Watch `sha`, the head a fix run of `fixed` pushed (read from the PR/MR): its
        attempts, requester and thread carry on."""
        now = self._clock()
        watch = replace(
            fixed, appeared_at=None, reran=False, failing=(), sha=sha, state=WatchState.WATCHING, started_at=now, acted_at=now
        )
        await asyncio.to_thread(self._watches.save_watch, watch)
        log.info("%s: watching CI of %s, the fix run's push read from its PR/MR", watch.task_key, sha[:12])

    async def _lease(self, key: str) -> bool:
        lease_seconds = self._config.scheduling.lease_seconds
        return await asyncio.to_thread(self._store.leases.acquire_lease, key, self._owner, lease_seconds)

    async def _start(self, source: Source, claim: Claim, result: RunResult, fixed: CiWatch | None) -> None:
        """Watch `result`'s push; `fixed`: the watch a CI fix run ended (its attempts and
        thread carry on; a taken-over fix run's claim knows no thread)."""
        pushed = result.pushed
        assert pushed is not None
        now = self._clock()
        attempts = fixed.attempts if fixed is not None else 0
        thread = claim.reply_to if isinstance(claim, ReviewClaim) else None
        reply_to = str(thread) if thread is not None else (fixed.reply_to if fixed is not None else None)
        bot = (source.bot_name or "").casefold()
        watch = CiWatch(
            task_key=str(claim.task.key),
            project=pushed.project,
            number=pushed.number,
            head_branch=pushed.branch,
            sha=pushed.sha,
            state=WatchState.WATCHING,
            started_at=now,
            acted_at=now,
            attempts=attempts,
            max_attempts=self._settings.max_fix_attempts,
            requester=claim.requester,
            reply_to=reply_to,
            bot_assigned=bool(bot) and any(name.casefold() == bot for name in claim.task.assignees),
        )
        await asyncio.to_thread(self._watches.save_watch, watch)
        sha, branch = pushed.sha[:12], pushed.branch
        log.info("%s: watching CI of %s on %s (fix attempts used: %d)", watch.task_key, sha, branch, attempts)

    # -- driven by the producer's polls and by webhooks ------------------------------

    async def poll(self, offer: Offer) -> set[str]:
        """Look at every live watch once: one `ci_report` per watch waiting on CI; a fix
        decided but not claimed yet (its message lost) is offered again.

        Returns the keys of the PRs/MRs whose fix is offered or running now: their review
        threads are for a later poll, as a look at them takes the lease the fix needs."""
        if not self.enabled:
            return set()
        for watch in await asyncio.to_thread(self._watches.live_watches):
            source = self._source(watch.task_key)
            if source is None:
                continue
            if watch.state is WatchState.FIX:
                await offer(watch.task_key)
                continue
            try:
                if watch.state is WatchState.FIXING:
                    await self._recover(source, watch.task_key)
                else:
                    await self._drive(source, watch.task_key, offer)
            except (QueueUnavailable, OperationalError):
                raise  # the cycle's own outage handling
            except Exception:  # one watch's bug is not the poll's end
                log.exception("%s: the CI watch failed; the next poll looks again", watch.task_key)
        fixing = (WatchState.FIX, WatchState.FIXING)
        live = await asyncio.to_thread(self._watches.live_watches)
        return {str(_change_key(watch.task_key, watch)) for watch in live if watch.state in fixing}

    async def _recover(self, source: Source, task_key: str) -> None:
        """A fix run whose end never reached its watch: its worker died after the run
        ended, before `after_run`. Once no worker holds the task and its latest run has
        ended, the watch moves on as that end would have moved it, the push read from the
        PR/MR's head. A run not begun yet or still going is left to its takeover."""
        # Read first without the lease: a run still going is not kept from its takeover.
        if await self._ended_fix(task_key) is None or not await self._lease(task_key):
            return  # nothing ended, or a worker is at it (its run, or its run's end)
        try:
            ended = await self._ended_fix(task_key)
            if ended is not None:
                watch, status = ended
                log.warning("%s: a CI fix run ended %s without its watch knowing; moved on", task_key, status)
                await self._fix_ended(source, watch, status, known=False)
        except AgentError as error:
            log.error("%s: CI watch: %s; the next poll looks again", task_key, self._redactor.text(str(error)))
        finally:
            await asyncio.to_thread(self._store.leases.release_lease, task_key, self._owner)

    async def _ended_fix(self, task_key: str) -> tuple[CiWatch, str] | None:
        """The `fixing` watch of `task_key` and how its fix run ended; None while the fix
        run has not begun (`claim_cut_short` starts it) or goes on (its end moves it)."""
        watch = await asyncio.to_thread(self._watches.watch, task_key)
        if watch is None or watch.state is not WatchState.FIXING:
            return None
        latest = await asyncio.to_thread(self._store.runs.latest_run, task_key)
        if latest is None or latest.started_at < watch.acted_at or latest.status not in ("done", "failed", "stopped"):
            return None
        return watch, latest.status

    def hint(self, forge: str, project: str, sha: str, offer: Offer) -> None:
        """A CI webhook about commit `sha` of `project`: its watches are looked at now, in
        the background (the webhook is answered at once)."""
        if not self.enabled:
            return
        task = asyncio.create_task(self._drive_commit(forge, project, sha, offer))
        self._background.add(task)
        task.add_done_callback(self._background.discard)

    async def _drive_commit(self, forge: str, project: str, sha: str, offer: Offer) -> None:
        try:
            for watch in await asyncio.to_thread(self._watches.watches_of, project, sha):
                source = self._source(watch.task_key)
                waiting = watch.state in (WatchState.WATCHING, WatchState.RERUN)
                if source is not None and source.forge == forge and waiting:
                    await self._drive(source, watch.task_key, offer)
        except QueueUnavailable as error:  # the fix decided stays `fix`: the next poll offers it
            cause = self._redactor.text(str(error))
            log.error("%s: a CI webhook's fix for %s: %s; the next poll offers it", project, sha[:12], cause)
        except Exception:  # a hint is a hint: the next poll looks again
            log.exception("%s: a CI webhook's look at %s failed; the next poll looks again", project, sha[:12])

    def _source(self, task_key: str) -> Source | None:
        return next((source for source in self._sources if task_key.startswith(f"{source.forge}:")), None)

    async def _drive(self, source: Source, task_key: str, offer: Offer) -> None:
        """One look at one watch under its task's lease (busy: the next look decides);
        none while the pause signal holds every task (SPEC 8.3). A fix it decides is
        offered once the lease is let go: the fix run's claim takes that lease, and a
        worker that took the offer at once found it busy and dropped the message."""
        if self._signal_file is not None and self._signal_file.exists():
            return
        if not await self._lease(task_key):
            return
        fix_decided = False
        try:
            watch = await asyncio.to_thread(self._watches.watch, task_key)
            if watch is None or watch.state not in (WatchState.WATCHING, WatchState.RERUN):
                return  # another look acted on it meanwhile
            report = await source.ci_report(watch.project, watch.sha)
            fix_decided = await self._decide_and_act(source, watch, report)
        except AgentError as error:
            log.error("%s: CI watch: %s; the next poll looks again", task_key, self._redactor.text(str(error)))
        finally:
            await asyncio.to_thread(self._store.leases.release_lease, task_key, self._owner)
        if fix_decided:
            await offer(task_key)

    async def _decide_and_act(self, source: Source, watch: CiWatch, report: CiReport) -> bool:
        """Decide on `report` and act; True when the action is a fix run, to be offered."""
        now = self._clock()
        if report.appeared and watch.appeared_at is None:
            watch = await asyncio.to_thread(self._watches.update_watch, watch, appeared_at=now)
        if watch.state is WatchState.RERUN and report.state is CheckState.PENDING:
            watch = await asyncio.to_thread(self._watches.update_watch, watch, state=WatchState.WATCHING)
        decision = decide(watch, report, now, self._settings)
        if decision.action == "wait":
            return False
        if decision.action == "no_ci":  # nothing to say, nothing to check
            await asyncio.to_thread(self._watches.update_watch, watch, state=WatchState.NO_CI, acted_at=now)
            log.info("%s: no CI appeared for %s; not watched any more", watch.task_key, watch.sha[:12])
            return False
        verdict = await self._still_ours(source, watch)
        if verdict == "hold":
            return False
        if verdict == "end":
            await asyncio.to_thread(self._watches.update_watch, watch, state=WatchState.ENDED, acted_at=now)
            return False
        if decision.action == "rerun":
            watch, decision = await self._rerun(source, watch, decision, report, now)
        await self._act(source, watch, decision, now)
        return decision.action == "fix"

    async def _still_ours(self, source: Source, watch: CiWatch) -> Literal["go", "hold", "end"]:
        """Whether the watch may act now: the task not stopped, paused or closed, and the
        PR/MR open with the agent's push still its head."""
        key = watch.task_key
        task = await source.get_task(TaskKey.parse(key))
        labels = source.labels
        bot = (source.bot_name or "").casefold()
        if task.state != "open" or task.has_label(labels.stopped_label) or task.has_label(labels.failed_label):
            log.info("%s: closed or stopped; its CI watch ends", key)
            return "end"
        if watch.bot_assigned and bot and not any(name.casefold() == bot for name in task.assignees):
            log.info("%s: the bot was unassigned; its CI watch ends", key)
            return "end"
        if await asyncio.to_thread(self._store.steering.control_request, key) == "pause":
            return "hold"  # `coding-agent pause TASK`: until its resume
        if not task.has_label(labels.done_label):
            return "hold"  # paused, or being worked again: looked at again later
        change = await source.find_open_change(watch.project, watch.head_branch)
        if change is None or change.number != watch.number:
            log.info("%s: its PR/MR is closed or merged; its CI watch ends", key)
            return "end"
        if change.head_sha is not None and change.head_sha != watch.sha:
            log.info("%s: someone else pushed %s; its CI watch ends", key, change.head_sha[:12])
            return "end"
        return "go"

    async def _rerun(
        self, source: Source, watch: CiWatch, decision: CiDecision, report: CiReport, now: float
    ) -> tuple[CiWatch, CiDecision]:
        """Ask for the failed checks to run again, once per thing to re-run; when the forge
        re-runs none of them, the failures are decided on as they are."""
        asked: set[str] = set()
        for check in decision.checks:
            if check.rerun_id is not None and check.rerun_id not in asked:
                if await source.ci_rerun(watch.project, check):
                    asked.add(check.rerun_id)
        if asked:
            watch = await asyncio.to_thread(
                self._watches.update_watch,
                watch,
                state=WatchState.RERUN,
                reran=True,
                acted_at=now,
                failing=decision.checks,
            )
            log.info("%s: re-running %d failed check(s) of %s", watch.task_key, len(asked), watch.sha[:12])
            return watch, CiDecision("wait")
        watch = await asyncio.to_thread(self._watches.update_watch, watch, reran=True)
        return watch, decide(watch, report, now, self._settings)

    async def _act(self, source: Source, watch: CiWatch, decision: CiDecision, now: float) -> None:
        key, sha = watch.task_key, watch.sha[:12]
        update = self._watches.update_watch
        if decision.action == "timed_out":
            await asyncio.to_thread(update, watch, state=WatchState.TIMED_OUT, acted_at=now)
            await self._comment(source, key, watch, "ci_timed_out", seconds=int(self._settings.watch_seconds))
        elif decision.action == "passed":
            state = WatchState.FLAKY if decision.flaky else WatchState.PASSED
            await asyncio.to_thread(update, watch, state=state, acted_at=now)
            names = ", ".join(self._shown(check.name, _NAME_CHARS) for check in watch.failing) or "?"
            extra = {"names": names} if decision.flaky else {}
            ready = self._settings.ready_when_green and await self._mark_ready(source, watch)
            name = "ci_flaky" if decision.flaky else "ci_passed"
            counted = "ci_checks_one" if decision.total == 1 else "ci_checks_many"
            checks = notice(counted, self._config.language, count=decision.total)
            await self._comment(source, key, watch, name, ready, checks=checks, **extra)
        elif decision.action == "fix":
            await asyncio.to_thread(update, watch, state=WatchState.FIX, acted_at=now, failing=decision.checks)
            log.info("%s: CI failed on %s (%d check(s)); a fix run is offered", key, sha, len(decision.checks))
        elif decision.action == "give_up":
            await asyncio.to_thread(update, watch, state=WatchState.FAILED, acted_at=now, failing=decision.checks)
            listing = self._listing(decision.checks)
            await self._comment(source, key, watch, "ci_failed", attempts=watch.attempts, checks=listing)

    async def _mark_ready(self, source: Source, watch: CiWatch) -> bool:
        try:
            await source.mark_change_ready(watch.project, watch.number)
        except AgentError as error:
            log.error("%s: the draft could not be marked ready: %s", watch.task_key, self._redactor.text(str(error)))
            return False
        return True

    def _listing(self, checks: tuple[Check, ...]) -> str:
        language = self._config.language
        return "\n".join(
            notice(
                "ci_check",
                language,
                check=self._shown(check.name, _NAME_CHARS),
                conclusion=self._shown(check.conclusion, _CONCLUSION_CHARS),
                url=f" ({self._shown(check.url, _URL_CHARS)})" if check.url else "",
            )
            for check in checks
        )

    def _shown(self, words: str, limit: int) -> str:
        """A check's name, conclusion or URL as the watch's comment shows it: the CI's
        words (the branch's code names its checks, SPEC 15 "Speak through CI") redacted,
        then one inert line: no heading, mention, image or link."""
        return inert_line(self._redactor.text(words), limit)

    async def _comment(
        self, source: Source, task_key: str, watch: CiWatch, name: str, ready: bool = False, **values: object
    ) -> None:
        """The watch's one comment, in the PR/MR; recorded first, so a crash loses it
        rather than posting it twice."""
        language = self._config.language
        body = notice(name, language, sha=watch.sha[:12], **values)
        if ready:
            body += "\n\n" + notice("ci_ready", language)
        try:
            await source.post_comment(_change_key(task_key, watch), self._redactor.text(body))
        except AgentError as error:
            log.error("%s: the CI comment could not be posted: %s", task_key, self._redactor.text(str(error)))

    # -- the fix run's claim (asked by the follow-up intake) ------------------------

    async def claim_fix(self, source: Source, task: Task) -> Claim | None:
        """A CI fix run of `task` when its watch decided one: lease, fresh re-read, daily
        budget, the failing checks' logs read, label swap done -> processing. None when no
        fix is waiting (the follow-up claim goes on), or it cannot start now."""
        key = str(task.key)
        if not self.enabled:
            return None
        watch = await asyncio.to_thread(self._watches.watch, key)
        if watch is None or watch.state is not WatchState.FIX:
            return None
        if not await self._lease(key):
            return None
        claim: Claim | None = None
        try:
            claim = await self._claim_leased(source, key)
        finally:
            if claim is None:
                await asyncio.to_thread(self._store.leases.release_lease, key, self._owner)
        return claim

    async def _claim_leased(self, source: Source, key: str) -> Claim | None:
        watch = await asyncio.to_thread(self._watches.watch, key)
        if watch is None or watch.state is not WatchState.FIX:
            return None  # claimed meanwhile
        verdict = await self._still_ours(source, watch)
        if verdict != "go":
            if verdict == "end":
                await asyncio.to_thread(self._watches.update_watch, watch, state=WatchState.ENDED)
            return None
        fresh = await source.get_task(TaskKey.parse(key))
        if self._budgets is not None and await self._budgets.held(source, fresh, watch.requester):
            return None  # the budget's comment said so; the next poll offers it again
        attempt = watch.attempts + 1
        fix = await self._fix_of(source, watch, attempt)
        present = [label for label in fresh.labels if label in lifecycle_labels(source)]
        await transition(source, fresh.key, source.labels.processing_label, present)
        now = self._clock()
        changes = {"state": WatchState.FIXING, "attempts": attempt, "acted_at": now}
        await asyncio.to_thread(self._watches.update_watch, watch, **changes)
        log.info("%s: CI fix run %d of %d claimed for %s", key, attempt, fix.max_attempts, watch.sha[:12])
        return self._claim(fresh, watch, fix)

    async def claim_cut_short(self, source: Source, task: Task) -> Claim | None:
        """The CI fix run of `task` whose worker died after the label swap, before its run
        began (the caller holds the lease and saw `processing`); None when the cut-short
        claim was not a CI fix's."""
        key = str(task.key)
        watch = await asyncio.to_thread(self._watches.watch, key) if self.enabled else None
        if watch is None or watch.state is not WatchState.FIXING:
            return None
        latest = await asyncio.to_thread(self._store.runs.latest_run, key)
        if latest is not None and latest.started_at >= watch.acted_at:
            return None  # its run began (and is taken over as a run)
        log.warning("%s: a CI fix run's worker stopped before its run began; starting it", key)
        return self._claim(task, watch, await self._fix_of(source, watch, watch.attempts))

    async def _fix_of(self, source: Source, watch: CiWatch, attempt: int) -> CiFix:
        """What fix run `attempt` starts from: each failing check with its log's tail."""
        lines = self._settings.log_tail_lines
        failing = []
        for check in watch.failing:
            tail = await source.ci_log_tail(watch.project, check, lines)
            failing.append(FailingCheck(check, _last_lines(tail, lines)))
        return CiFix(watch.sha, watch.head_branch, attempt, watch.max_attempts, tuple(failing))

    @staticmethod
    def _claim(task: Task, watch: CiWatch, fix: CiFix) -> CiFixClaim:
        reply_to = ThreadRef.parse(watch.reply_to) if watch.reply_to else None
        return CiFixClaim(task=task, requester=watch.requester, reply_to=reply_to, ci_fix=fix)


def _last_lines(text: str | None, lines: int) -> str | None:
    """At most the last `lines` lines of `text` (a forge may hand back more than asked)."""
    if text is None:
        return None
    return "\n".join(text.splitlines()[-lines:])

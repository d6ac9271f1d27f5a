"""Follow-ups (SPEC 3): a new @mention of the bot on a task it finished starts a new run.

Discovery stays cheap: each source lists done items updated recently (one search / two
listings per scope), and an item whose `updated_at` is the one already examined costs no
request at all. Only a changed item is read: its comments are checked for the newest one
after the bot's last comment that @mentions the bot.

That comment is recorded before anything happens, so it never acts twice:
- from someone without write access: ignored (their text is never an instruction);
- a completion comment ("@bot thanks, done!"): a short acknowledgement, no run;
- otherwise: the claim swaps `done` for `processing`, and the runner starts a new run of
  the same task, which inherits the previous run's summary (its thread memory and its
  final comment, an assistant turn of the conversation). A "run" that no run followed
  is decided again at the next look when the swap failed (the task still `done`); when
  its worker died after the swap, the takeover (`Recovery`) reads the decision (who
  asked, which thread) and starts the run as that follow-up (`claim_cut_short`).

The same holds in review threads: each thread's newest @mention after the bot's last
word there is a trigger too, and the run answers in that thread (`ReviewClaim.reply_to`).
On a PR/MR that was itself the task, its threads are read with its comments (one more
request for a changed item) and the run is a run of that PR/MR, on its head branch. On
the PR/MR the agent opened for an issue (`agents_issue`: its head is the task branch,
pushed to the issue's own repository), the candidates are the bot's open PRs/MRs (one
search / one listing per scope), the `updated_at` trick applies to the PR/MR, and the
run is a run of the issue: it pushes to the same branch (so the PR/MR is updated, never
a second one opened).
"""

from __future__ import annotations

import asyncio
import logging
import re
from collections.abc import Awaitable, Callable, Sequence
from typing import Literal

from coding_agent.context.completion import CompletionDetector
from coding_agent.context.conversation import is_bot
from coding_agent.domain.tasks import Comment, Task, TaskKey, TaskKind, Thread, ThreadRef
from coding_agent.prompts.notices import Language, notice
from coding_agent.redaction import Redactor
from coding_agent.runtime.budgets import Budgets
from coding_agent.runtime.ci_watch import CiWatcher
from coding_agent.runtime.intake import Claim, ReviewClaim
from coding_agent.sources.base import Source
from coding_agent.sources.lifecycle import lifecycle_labels, transition
from coding_agent.store.followups import FollowUpRecords
from coding_agent.store.state import StateStore
from coding_agent.workspace.checkout import BRANCH_PREFIX

__all__ = ["FollowUpIntake", "agents_issue", "find_followup_comment", "mentions", "thread_triggers"]

log = logging.getLogger(__name__)

_TASK_BRANCH = re.compile(rf"^{re.escape(BRANCH_PREFIX)}(?P<number>[1-9][0-9]*)-")


def mentions(text: str, login: str) -> bool:
    """`@login` as a whole mention (not `@login-two`, not an e-mail address). A GitHub
    App's bot `slug[bot]` is mentioned as `@slug` (SPEC 17), or in full."""
    name = login[: -len("[bot]")] if login.lower().endswith("[bot]") else login
    pattern = rf"(?<![\w@.])@{re.escape(name)}(?:\[bot\])?(?![\w-])"
    return re.search(pattern, text, re.IGNORECASE) is not None


def thread_triggers(threads: Sequence[Thread], bot_name: str) -> list[tuple[Thread, Comment]]:
    """Per review thread, the newest @mention of the bot after its last word there; oldest first."""
    found = [(thread, find_followup_comment(thread.comments, bot_name)) for thread in threads]
    return sorted(((t, c) for t, c in found if c is not None), key=lambda hit: hit[1].created_at)


def find_followup_comment(comments: Sequence[Comment], bot_name: str) -> Comment | None:
    """The newest comment after the bot's last one that @mentions the bot, if any.

    Forges stamp whole seconds, so a comment posted in the same second as the bot's is
    ordered by its place in the listing (oldest first), not by a reversed sort that would
    put the bot's comment after it.
    """
    for comment in reversed(sorted(comments, key=lambda c: c.created_at)):
        if is_bot(comment.author, bot_name):
            return None
        if mentions(comment.body, bot_name):
            return comment
    return None


def agents_issue(change: Task, bot_name: str) -> TaskKey | None:
    """The issue the agent opened `change` for, or None when `change` is not such a PR/MR.

    Such a PR/MR is the bot's own, and its head is a task branch of the same repository
    (a fork's branch of the same name is someone else's).
    """
    if not change.key.is_change or change.author.lower() != bot_name.lower():
        return None
    match = _TASK_BRANCH.match(change.head_branch or "")
    head_repo = change.extra.get("head_repo", change.key.project)
    if match is None or head_repo.lower() != change.key.project.lower():
        return None
    return TaskKey(change.key.forge, change.key.project, TaskKind.ISSUE, int(match["number"]))


class FollowUpIntake:
    """Claims follow-ups, as `Intake` claims labelled tasks: lease, fresh re-read, checks, label swap."""

    def __init__(
        self,
        store: StateStore,
        owner: str,
        lease_seconds: float,
        redactor: Redactor,
        language: Language,
        completion_keywords: Sequence[str],
        allow_untrusted: bool,
        budgets: Budgets | None = None,
        ci: CiWatcher | None = None,
    ) -> None:
        """`budgets`: the daily budgets a follow-up run must be within to start (None: none).
        `ci`: the CI watches (SPEC 16), whose fix runs are claimed here first (None: off)."""
        self._store = store
        self._ci = ci
        self._budgets = budgets
        self._records = FollowUpRecords(store.engine)
        self._owner = owner
        self._lease_seconds = lease_seconds
        self._redactor = redactor
        self._language = language
        self._is_completion = CompletionDetector(completion_keywords)
        self._allow_untrusted = allow_untrusted

    def unchanged(self, tasks: Sequence[Task]) -> set[str]:
        """The keys of `tasks` examined already at their `updated_at`: `try_claim` would
        return None for them without a request. Blocking (one read of the store)."""
        return self._records.examined([(str(task.key), task.updated_at) for task in tasks])

    async def try_claim(self, source: Source, task: Task) -> Claim | None:
        """Claim `task` for a follow-up run, or return None (nothing new, acknowledged, refused)."""
        key = str(task.key)
        if self._ci is not None and (fix := await self._ci.claim_fix(source, task)) is not None:
            return fix
        if not source.bot_name or await asyncio.to_thread(self._records.seen, key, task.updated_at):
            return None
        if task.key.is_change and not task.has_label(source.labels.done_label):
            return await self._try_review(source, task, source.bot_name)
        if not await asyncio.to_thread(self._store.leases.acquire_lease, key, self._owner, self._lease_seconds):
            return None
        try:
            claim = await self._examine(source, key, source.bot_name, task)
        except BaseException:
            await asyncio.to_thread(self._store.leases.release_lease, key, self._owner)
            raise
        if claim is None:
            await asyncio.to_thread(self._store.leases.release_lease, key, self._owner)
        return claim

    async def _examine(self, source: Source, key: str, bot_name: str, task: Task) -> Claim | None:
        fresh = await source.get_task(task.key)
        if not fresh.has_label(source.labels.done_label):
            return None
        seen_at = fresh.updated_at
        hits: list[tuple[Comment, ThreadRef | None]] = []
        top_level = find_followup_comment(await source.list_comments(task.key), bot_name)
        if top_level is not None:
            hits.append((top_level, None))
        if fresh.key.is_change:  # a PR/MR that was itself the task: its review threads ask too
            threads = await source.list_threads(fresh.key)
            hits += [(c, ThreadRef(fresh.key, t.id)) for t, c in thread_triggers(threads, bot_name)]
        claim = await self._claim_first(source, fresh, key, sorted(hits, key=lambda hit: hit[0].created_at))
        if claim is False:
            return None  # not marked seen: `_held_before` claims it once the budget lets it go
        if claim is None:
            claim = await self._held_before(source, fresh, key)
            if claim is None:
                await asyncio.to_thread(self._records.mark_seen, key, seen_at)
        return claim or None

    async def _claim_first(
        self, source: Source, task: Task, record_key: str, hits: Sequence[tuple[Comment, ThreadRef | None]]
    ) -> Claim | Literal[False] | None:
        """Decide each @mention in `hits` (oldest first; with the thread it was asked in,
        None: top-level) not decided yet, recorded under `record_key` (where the comments
        are), and claim `task` for the first that asks for a run: None when none does,
        False when a daily budget holds that run."""
        for trigger, reply_to in hits:
            if await self._handled(record_key, trigger.id, str(task.key)):
                continue

            async def acknowledge(text: str, thread: ThreadRef | None = reply_to) -> None:
                if thread is None:
                    await source.post_comment(task.key, text)
                else:
                    await source.reply_in_thread(thread.change, thread.thread_id, text)

            if await self._decide(source, task.key, record_key, trigger, acknowledge, reply_to) != "run":
                continue
            if self._budgets is not None and await self._budgets.held(source, task, trigger.author):
                return False
            await self._swap_labels(source, task)
            where = f"thread {reply_to.thread_id} of {reply_to.change}" if reply_to is not None else "a comment"
            log.info("%s: follow-up claimed from %s (comment %s by %s)", task.key, where, trigger.id, trigger.author)
            return ReviewClaim(task=task, requester=trigger.author, writers=self._writers(trigger), reply_to=reply_to)
        return None

    async def _held_before(self, source: Source, task: Task, key: str) -> Claim | Literal[False] | None:
        """A follow-up on the task itself that a daily budget held (its "run" recorded, no
        run since; the budget's comment is now the newest word, so its @mention is no longer
        the trigger): its claim once the budget lets it go, False while it still holds it,
        None when there is none. Trust is read afresh by the run."""
        if self._budgets is None or not self._budgets.enabled:
            return None
        decided = await asyncio.to_thread(self._records.run_decided_after, key, await self._last_run_start(key))
        if decided is None or decided[1] is not None:  # none, or a review thread's (found there)
            return None
        requester = decided[0]
        if await self._budgets.held(source, task, requester):
            return False
        await self._swap_labels(source, task)
        log.info("%s: follow-up by %s claimed, its daily budget allowing it now", key, requester)
        return Claim(task=task, requester=requester)

    async def _decide(
        self,
        source: Source,
        task_key: TaskKey,
        record_key: str,
        trigger: Comment,
        acknowledge: Callable[[str], Awaitable[None]],
        reply_to: ThreadRef | None = None,
    ) -> str:
        """Record what `trigger` leads to (before acting: it never acts twice) and do the
        small things (an acknowledgement); "run" means a follow-up run of `task_key` is to
        start, answering in `reply_to` (None: on the task)."""
        if not self._allow_untrusted and not (await source.get_permission(task_key, trigger.author)).can_write:
            log.warning("%s: @mention by %s (no write access) ignored", record_key, trigger.author)
            await asyncio.to_thread(self._records.handle, record_key, trigger.id, "ignored")
            return "ignored"
        if self._is_completion(trigger.body):
            # Recorded first: a crash right after costs the acknowledgement, never a second one.
            await asyncio.to_thread(self._records.handle, record_key, trigger.id, "acknowledged")
            await acknowledge(self._redactor.text(notice("followup_ack", self._language, user=trigger.author)))
            log.info("%s: completion comment %s by %s acknowledged; no new run", record_key, trigger.id, trigger.author)
            return "acknowledged"
        run = (str(task_key), trigger.author, reply_to)
        await asyncio.to_thread(self._records.handle, record_key, trigger.id, "run", run)
        return "run"

    async def _handled(self, record_key: str, comment_id: str, run_key: str) -> bool:
        """Whether the comment needs nothing more: a decision was recorded, and a "run"
        decision became a run of `run_key`.

        "run" is recorded before the label swap, so a comment never acts twice; a worker
        that died between the two left a "run" that no run followed (the task still
        `done`). Such a comment is decided again, under the lease the caller holds. A run
        that began counts even if it never answered (its thread reply failed): it started
        after the record.
        """
        decision = await asyncio.to_thread(self._records.handled, record_key, comment_id)
        if decision is None:
            return False
        action, decided_at = decision
        if action != "run":
            return True
        if await self._last_run_start(run_key) >= decided_at:
            return True
        log.warning("%s: comment %s was to start a run that never began; claiming it again", record_key, comment_id)
        return False

    async def _last_run_start(self, run_key: str) -> float:
        """When the newest run of `run_key` started (-inf: never). A "run" decision recorded
        before it became that run (or an earlier one); one recorded after it, none yet."""
        latest = await asyncio.to_thread(self._store.runs.latest_run, run_key)
        return latest.started_at if latest is not None else float("-inf")

    async def claim_cut_short(self, source: Source, task: Task) -> Claim | None:
        """The follow-up claim of `task` whose worker died after the label swap, before its
        run began (the caller holds the lease and saw `processing`): a CI fix run's, else
        the newest "run" decision that no run of the task followed, as a claim of who asked
        and where to answer; None when the cut-short claim was not a follow-up's. Trust is
        read afresh."""
        if self._ci is not None and (fix := await self._ci.claim_cut_short(source, task)) is not None:
            return fix
        key = str(task.key)
        decided = await asyncio.to_thread(self._records.run_decided_after, key, await self._last_run_start(key))
        if decided is None:
            return None
        requester, reply_to = decided
        log.warning("%s: a follow-up's worker stopped before its run began; starting it", key)
        if reply_to is not None:
            return ReviewClaim(task=task, requester=requester, reply_to=reply_to)
        return Claim(task=task, requester=requester)

    def _writers(self, trigger: Comment) -> frozenset[str]:
        """Whose write access `_decide` read before it said "run": the trigger's author,
        unless untrusted triggers are allowed (then it read nothing)."""
        return frozenset() if self._allow_untrusted else frozenset({trigger.author})

    async def _swap_labels(self, source: Source, task: Task) -> None:
        present = [label for label in task.labels if label in lifecycle_labels(source)]
        await transition(source, task.key, source.labels.processing_label, present)

    # -- review threads on the PR/MR the agent opened ------------------------------------

    async def _try_review(self, source: Source, change: Task, bot_name: str) -> Claim | None:
        """A follow-up asked in a review thread of the agent's PR/MR: a run of its issue."""
        fresh = change if change.head_branch else await source.get_task(change.key)
        issue_key = agents_issue(fresh, bot_name)
        if issue_key is None:
            return None
        lease_key = str(issue_key)
        # The issue's run may be running in this very process: its lease is then not free.
        if not await asyncio.to_thread(self._store.leases.acquire_lease, lease_key, self._owner, self._lease_seconds):
            return None  # the task is running (or claimed): the thread is looked at again later
        try:
            claim = await self._examine_review(source, fresh, issue_key, bot_name)
        except BaseException:
            await asyncio.to_thread(self._store.leases.release_lease, lease_key, self._owner)
            raise
        if claim is None:
            await asyncio.to_thread(self._store.leases.release_lease, lease_key, self._owner)
        return claim

    async def _examine_review(self, source: Source, change: Task, issue_key: TaskKey, bot_name: str) -> Claim | None:
        record_key, seen_at = str(change.key), change.updated_at
        issue = await source.get_task(issue_key)
        if issue.has_label(source.labels.done_label):
            threads = await source.list_threads(change.key)
            hits = [(c, ThreadRef(change.key, t.id)) for t, c in thread_triggers(threads, bot_name)]
            claim = await self._claim_first(source, issue, record_key, hits)
            if claim is not None:
                return claim or None  # held by a budget: not marked seen, decided again at the next look
        await asyncio.to_thread(self._records.mark_seen, record_key, seen_at)
        return None

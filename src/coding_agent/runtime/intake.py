"""Claiming a discovered task (SPEC 3): lease, fresh re-read, trigger check, label swap.

The order matters for "two workers never work one task": the lease is taken first, then
the task is re-read from the forge, and only a task that still carries the trigger label
is claimed. A worker that saw a stale snapshot (another worker already claimed and maybe
finished it) finds the label gone and backs off.
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass, field

from coding_agent.domain.tasks import Permission, Task, ThreadRef
from coding_agent.prompts.notices import Language, notice
from coding_agent.redaction import Redactor
from coding_agent.runtime.budgets import Budgets
from coding_agent.sources.base import Source
from coding_agent.sources.lifecycle import lifecycle_labels, transition
from coding_agent.store.state import StateStore

__all__ = ["Claim", "ReviewClaim", "Intake"]

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Claim:
    """A task this worker now holds: labelled processing, lease taken.

    `writers`: the users this claim found to have write access, read moments before the
    run starts; the run trusts them without asking again. Its other trust is read fresh,
    and nothing is carried from one run to the next.
    """

    task: Task
    requester: str | None
    writers: frozenset[str] = field(default_factory=frozenset, kw_only=True)


@dataclass(frozen=True)
class ReviewClaim(Claim):
    """A follow-up claimed from a review thread: the run answers in `reply_to`."""

    reply_to: ThreadRef | None = None


class Intake:
    def __init__(
        self,
        store: StateStore,
        owner: str,
        lease_seconds: float,
        redactor: Redactor,
        language: Language,
        allow_untrusted_triggers: bool,
        budgets: Budgets | None = None,
    ) -> None:
        """`budgets`: the daily budgets a task must be within to start (None: none)."""
        self._store = store
        self._budgets = budgets
        self._owner = owner
        self._lease_seconds = lease_seconds
        self._redactor = redactor
        self._language = language
        self._allow_untrusted = allow_untrusted_triggers

    async def try_claim(self, source: Source, task: Task) -> Claim | None:
        """Claim `task` for this worker, or return None when it is not ours to work."""
        key = str(task.key)
        if not await asyncio.to_thread(self._lease_unless_refused, key, task.updated_at.isoformat()):
            return None
        claim: Claim | None = None
        try:
            # The task as it is now (under the lease) and who labelled it, read at once: a
            # start waits for one round trip, not two (the second is wasted only when the
            # label is gone meanwhile).
            fresh, requester = await asyncio.gather(source.get_task(task.key), source.find_trigger_user(task.key))
            claim = await self.claim_leased(source, fresh, requester)
        finally:
            if claim is None:
                await asyncio.to_thread(self._store.leases.release_lease, key, self._owner)
        return claim

    def _lease_unless_refused(self, key: str, updated_at: str) -> bool:
        """The task's lease, unless its trigger was refused as it stands or another worker
        holds it (one trip to the store's thread for both)."""
        if self._store.rejections.trigger_rejected(key, updated_at):
            return False
        if not self._store.leases.acquire_lease(key, self._owner, self._lease_seconds):
            log.info("%s: leased by another worker; skipped", key)
            return False
        return True

    async def claim_leased(self, source: Source, fresh: Task, requester: str | None) -> Claim | None:
        """The claim under a lease this worker already holds, of `fresh`, the task as read
        from the forge after the lease was taken, and `requester`, who labelled it (None:
        unknown), read with it: trigger, trust and daily budget checks, label swap. On None (or an error)
        the caller hands the lease back."""
        key = str(fresh.key)
        if not fresh.has_label(source.labels.bot_label):
            log.info("%s: no longer carries %r; skipped", key, source.labels.bot_label)
            return None
        if not self._allow_untrusted and not await self._may_trigger(source, fresh, requester):
            return None
        if self._budgets is not None and await self._budgets.held(source, fresh, requester):
            return None
        if not await asyncio.to_thread(self._store.leases.renew_lease, key, self._owner, self._lease_seconds):
            # The reads above outlasted the lease (a stalled worker) and another worker took
            # the task: what was read may be stale, and the labels are that worker's now.
            log.warning("%s: its lease ran out during the claim and another worker took it; skipped", key)
            return None
        present = [label for label in fresh.labels if label in (source.labels.bot_label, *lifecycle_labels(source))]
        await transition(source, fresh.key, source.labels.processing_label, present)
        log.info("%s: claimed (requested by %s)", key, requester or "unknown")
        # `_may_trigger` let the requester in only on the write access it just read.
        writers = frozenset({requester}) if requester and not self._allow_untrusted else frozenset()
        return Claim(task=fresh, requester=requester, writers=writers)

    async def _may_trigger(self, source: Source, task: Task, requester: str | None) -> bool:
        """Only users with write access may start the agent; others get one explanation."""
        permission = await source.get_permission(task.key, requester) if requester else Permission.NONE
        if permission.can_write:
            return True
        log.warning("%s: trigger by %s (%s access) refused", task.key, requester or "unknown user", permission.value)
        after = task
        # Explained once per task (SPEC 15).
        if not await asyncio.to_thread(self._store.rejections.trigger_ever_rejected, str(task.key)):
            text = (
                notice("untrusted_trigger", self._language, user=requester)
                if requester
                else notice("unknown_trigger", self._language)
            )
            await source.post_comment(task.key, self._redactor.text(text))
            after = await source.get_task(task.key)
        # Remember the task as it is now, so the next poll does not look again until
        # something changes (e.g. a maintainer re-labels it).
        await asyncio.to_thread(self._store.rejections.reject_trigger, str(task.key), after.updated_at.isoformat())
        return False

"""What a verified webhook does in the runtime (SPEC 11.2): steer the task's run (in this
process directly, in any other through a nudge in the state store), or enqueue the task
key through the producer (deduplicated like a poll's), and ignore a redelivered event
(`store/deliveries.py`)."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable

from coding_agent.agent.steering import RunControls
from coding_agent.runtime.ci_watch import CiWatcher
from coding_agent.runtime.producer import Producer
from coding_agent.runtime.queue import TaskQueue
from coding_agent.store.deliveries import DeliveryLog
from coding_agent.store.run_steering import RunSteering

__all__ = ["RuntimeWebhookSink"]

log = logging.getLogger(__name__)


class RuntimeWebhookSink:
    """Implements `web.webhooks.WebhookSink` on a service's producer, queue and runs."""

    def __init__(
        self,
        deliveries: DeliveryLog,
        controls: RunControls,
        steering: RunSteering,
        producer: Producer,
        queue: Callable[[], TaskQueue],
        ci: CiWatcher | None = None,
    ) -> None:
        """`ci`: the CI watches a CI event makes look at once (None: CI feedback off)."""
        self._ci = ci
        self._deliveries = deliveries
        self._controls = controls
        self._steering = steering
        self._producer = producer
        self._queue = queue

    async def first_delivery(self, delivery_id: str) -> bool:
        return await asyncio.to_thread(self._deliveries.first, delivery_id)

    async def accept(self, key: str, kind: str) -> None:
        if kind == "ci":
            if self._ci is not None:
                forge, _, rest = key.partition(":")
                project, _, sha = rest.rpartition("@")
                self._ci.hint(forge, project, sha, lambda task: self._producer.offer(self._queue(), task, "followup"))
            return
        if kind == "scope":
            self._producer.scope_changed()
            log.info("%s: webhook: the GitHub App's installation changed; looking for work now", key)
            return
        if kind == "steer":
            if self._controls.nudge(key):
                log.info("%s: webhook: its run checks the forge at its next checkpoint", key)
            else:  # its run, if any, is in another process (a `worker`): tell it through the store
                await asyncio.to_thread(self._steering.nudge_run, key)
                log.info("%s: webhook: nudge recorded for its run in any process", key)
            return
        await self._producer.offer(self._queue(), key, "followup" if kind == "followup" else "new")

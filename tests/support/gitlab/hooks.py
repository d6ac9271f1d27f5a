"""Webhook deliveries of the GitLab testing server, sent as GitLab sends them.

A change of CI state made by a test (or by a retry over the API) queues one delivery per
event; one background thread POSTs them in order to the configured URL with GitLab's
headers (`X-Gitlab-Event`, `X-Gitlab-Token`, `X-Gitlab-Event-UUID`, `Idempotency-Key`).
A thread, not the caller: the receiver is often served by the very event loop of the
test that changed the state, and a synchronous POST from it would wait on itself.
Every delivery is recorded with its answer, for tests to wait on.
"""

from __future__ import annotations

import json
import queue
import threading
import uuid
from dataclasses import dataclass
from typing import Any

import httpx

__all__ = ["HookDelivery", "HookSender"]


@dataclass(frozen=True)
class HookDelivery:
    """One delivery as sent: `status` is the receiver's answer, None when it could not be reached."""

    event: str
    uuid: str
    payload: dict[str, Any]
    status: int | None


class HookSender:
    """Posts queued deliveries to `url` from its own thread until `close`."""

    def __init__(self, url: str, token: str | None) -> None:
        self.url = url
        self._token = token
        self._hook_id = str(uuid.uuid4())  # the webhook's own id, the same on every delivery
        self._queue: queue.Queue[tuple[str, dict[str, Any]] | None] = queue.Queue()
        self._lock = threading.Lock()
        self._sent: list[HookDelivery] = []
        self._thread = threading.Thread(target=self._run, name="gitlab-sandbox-hooks", daemon=True)
        self._thread.start()

    def send(self, event: str, payload: dict[str, Any]) -> None:
        self._queue.put((event, payload))

    def deliveries(self) -> list[HookDelivery]:
        with self._lock:
            return list(self._sent)

    def close(self) -> None:
        self._queue.put(None)
        self._thread.join(timeout=30)

    def _run(self) -> None:
        with httpx.Client(timeout=30) as client:
            while (item := self._queue.get()) is not None:
                event, payload = item
                delivery_id = str(uuid.uuid4())
                headers = {
                    "Content-Type": "application/json",
                    "User-Agent": "GitLab/17.5.0",
                    "X-Gitlab-Event": event,
                    "X-Gitlab-Event-UUID": delivery_id,
                    "X-Gitlab-Webhook-UUID": self._hook_id,
                    "Idempotency-Key": delivery_id,
                    "X-Gitlab-Instance": "http://gitlab.sandbox",
                }
                if self._token is not None:
                    headers["X-Gitlab-Token"] = self._token
                try:
                    status: int | None = client.post(self.url, content=json.dumps(payload), headers=headers).status_code
                except httpx.HTTPError:
                    status = None
                with self._lock:
                    self._sent.append(HookDelivery(event, delivery_id, payload, status))

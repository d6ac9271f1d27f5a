"""The sandbox GitHub's own webhook deliveries: each CI change (`check_run`, `check_suite`,
`workflow_run`, `status`) POSTed to one target, signed as GitHub signs them.

The payload is rendered when the change happens (under the state's lock, so it shows
the world as it was then) and sent from a thread of its own: a test that sets CI from
the event loop the receiving server runs on must not wait for that server's answer.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import logging
import queue
import threading
import uuid
from dataclasses import dataclass

import httpx

from coding_agent.sandbox.github.records import CiEvent
from coding_agent.sandbox.github.render import Renderer
from coding_agent.sandbox.github.state import GitHubState

__all__ = ["WebhookDelivery", "WebhookSender", "signed_headers"]

log = logging.getLogger(__name__)


def signed_headers(event: str, body: bytes, secret: str, delivery: str | None = None) -> dict[str, str]:
    """GitHub's delivery headers: the event, a delivery id and the body's HMAC-SHA256."""
    signature = hmac.new(secret.encode(), body, hashlib.sha256).hexdigest()
    return {
        "X-GitHub-Event": event,
        "X-GitHub-Delivery": delivery or str(uuid.uuid4()),
        "X-Hub-Signature-256": f"sha256={signature}",
        "Content-Type": "application/json",
    }


@dataclass(frozen=True)
class WebhookDelivery:
    """One delivery as the target answered it (`status` None: no answer)."""

    event: str
    action: str
    delivery: str
    payload: bytes
    status: int | None


class WebhookSender:
    """Sends `state`'s CI changes to `target`, signed with `secret`, oldest first."""

    def __init__(self, state: GitHubState, target: str, secret: str, base_url: str) -> None:
        self._render = Renderer(state, api=base_url, web=base_url)
        self._target = target
        self._secret = secret
        self._queue: queue.Queue[tuple[str, str, bytes] | None] = queue.Queue()
        self._lock = threading.Lock()
        self._deliveries: list[WebhookDelivery] = []
        self._closed = False
        self._thread = threading.Thread(target=self._send_all, name="sandbox-github-webhooks", daemon=True)
        self._thread.start()
        state.on_ci(self._enqueue)

    def _enqueue(self, change: CiEvent) -> None:
        if self._closed:
            return
        payload = self._render.ci_webhook(change.event, change.action, change.repo, change.id)
        self._queue.put((change.event, change.action, json.dumps(payload).encode()))

    def _send_all(self) -> None:
        with httpx.Client(timeout=30.0) as client:
            while (item := self._queue.get()) is not None:
                event, action, body = item
                headers = signed_headers(event, body, self._secret)
                try:
                    status: int | None = client.post(self._target, content=body, headers=headers).status_code
                except httpx.HTTPError as error:
                    log.warning("sandbox github: webhook %s to %s failed: %s", event, self._target, error)
                    status = None
                with self._lock:
                    self._deliveries.append(WebhookDelivery(event, action, headers["X-GitHub-Delivery"], body, status))

    def deliveries(self) -> list[WebhookDelivery]:
        """What was sent so far, oldest first."""
        with self._lock:
            return list(self._deliveries)

    def close(self) -> None:
        """Stop after the deliveries already queued."""
        self._closed = True
        self._queue.put(None)
        self._thread.join(timeout=30)

"""The task queue between the producer and the workers (SPEC 11.1).

A message is a task key and why it was queued; the worker re-reads everything else from
the forge and the state store, so a message can never carry a stale or forged task.
`Delivery.ack` is called once the run reached a final state (or paused), so a worker lost
mid-run leaves its message to be redelivered (RabbitMQ).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Literal, Protocol, cast, get_args

from coding_agent.domain.tasks import TaskKey

__all__ = ["QueuedTask", "Reason", "Delivery", "Held", "TaskQueue", "MalformedMessage", "decode", "encode"]

# new: a discovered task with the trigger label; followup: a done task that may have a new
# @mention; continue: a paused run to resume or a dead worker's run to take over.
Reason = Literal["new", "followup", "continue"]
_REASONS = frozenset(get_args(Reason))
MAX_MESSAGE_BYTES = 4096


class MalformedMessage(ValueError):
    """A queue message that is not a task key and reason: logged and dead-lettered."""


@dataclass(frozen=True)
class QueuedTask:
    key: str
    reason: Reason


def encode(item: QueuedTask) -> bytes:
    return json.dumps({"key": item.key, "reason": item.reason}).encode()


def decode(body: bytes) -> QueuedTask:
    """Parse a message body; MalformedMessage names what is wrong (never echoes the body)."""
    if len(body) > MAX_MESSAGE_BYTES:
        raise MalformedMessage(f"message of {len(body)} bytes (at most {MAX_MESSAGE_BYTES})")
    try:
        data = json.loads(body)
    except (UnicodeDecodeError, json.JSONDecodeError):
        raise MalformedMessage("message body is not JSON") from None
    if not isinstance(data, dict):
        raise MalformedMessage("message body is not a JSON object")
    key, reason = data.get("key"), data.get("reason")
    if reason not in _REASONS:
        raise MalformedMessage(f"message field 'reason' must be one of {sorted(_REASONS)}")
    if not isinstance(key, str):
        raise MalformedMessage("message field 'key' must be a task key string")
    try:
        parsed = TaskKey.parse(key)
    except ValueError as error:  # names the key (at most 300 characters of it, quoted): one log line
        raise MalformedMessage(f"message field 'key': {error}") from None
    return QueuedTask(str(parsed), cast(Reason, reason))


class Delivery(Protocol):
    item: QueuedTask
    redelivered: bool

    async def ack(self) -> None:
        """The run reached done/failed/stopped/paused, or the task was not ours: forget it."""
        ...


@dataclass(frozen=True)
class Held:
    """What a queue can vouch for, to put the store's `queued` entries right after an outage
    (`QueueEntries.release_lost`): an entry queued before `as_of` (`time.time()`) whose key
    is not in `keys` has no message left, and is offered again."""

    keys: frozenset[str]
    as_of: float


class TaskQueue(Protocol):
    """`memory` (in-process) or `rabbitmq`; see `factory.open_queue`."""

    name: str
    shared: bool  # True when other processes read the same queue (dedup across them)

    async def put(self, item: QueuedTask, delay: float = 0.0) -> None:
        """Queue `item`, handed out no sooner than `delay` seconds from now."""
        ...

    async def held(self) -> Held | None:
        """The messages this queue still holds (waiting, or handed out and not yet
        acknowledged), as far as it can tell; None when it cannot."""
        ...

    async def get(self, wait: bool = True) -> Delivery | None:
        """The next message; with `wait=False`, None when the queue is empty."""
        ...

    async def aclose(self) -> None: ...

"""The Slack testing server's state: users, channels, messages, reactions, and every call answered.

In memory, behind one lock (the server's handlers and the test's thread both touch it)."""

from __future__ import annotations

import itertools
import threading
import time
from dataclasses import dataclass, field
from typing import Any

__all__ = ["SlackCall", "SlackFault", "SlackMessage", "SlackState", "SlackUser"]


@dataclass(frozen=True)
class SlackUser:
    id: str
    name: str
    email: str | None = None
    is_bot: bool = False


@dataclass
class SlackMessage:
    """One message; `thread_ts` is its thread's root (None for a top-level message that has no replies yet)."""

    channel: str
    ts: str
    user: str
    text: str
    thread_ts: str | None = None
    reactions: dict[str, list[str]] = field(default_factory=dict)
    edits: int = 0

    def as_json(self) -> dict[str, Any]:
        data: dict[str, Any] = {"type": "message", "ts": self.ts, "user": self.user, "text": self.text}
        if self.thread_ts is not None:
            data["thread_ts"] = self.thread_ts
        if self.reactions:
            data["reactions"] = [
                {"name": name, "users": list(users), "count": len(users)} for name, users in self.reactions.items()
            ]
        return data


@dataclass
class SlackFault:
    """What the next `times` calls of a method get instead of an answer: an HTTP `status`
    (429 with `retry_after` seconds, or a 5xx), and/or a wait on `gate` first."""

    times: int
    status: int | None = None
    retry_after: int = 1
    gate: threading.Event | None = None


@dataclass(frozen=True)
class SlackCall:
    """One Web API call as the server got it: the method, the token, the arguments (query, form and JSON merged)."""

    method: str
    token: str | None
    args: dict[str, Any]


class SlackState:
    """A workspace: one bot (whose token the agent holds), its users and channels."""

    def __init__(self, bot_token: str, app_token: str | None = None, team: str = "T0SANDBOX", bot_user: str = "U0BOT") -> None:
        self._lock = threading.Lock()
        self.bot_token = bot_token
        self.app_token = app_token
        self.acks: list[str] = []  # the envelope ids acknowledged over Socket Mode
        self.team = team
        self.bot_user = bot_user
        self.users: dict[str, SlackUser] = {bot_user: SlackUser(bot_user, "coding-agent", is_bot=True)}
        self.channels: dict[str, str] = {}
        self.messages: list[SlackMessage] = []
        self.calls: list[SlackCall] = []
        self.faults: dict[str, SlackFault] = {}
        self._clock = itertools.count(1)
        self._base = int(time.time())

    def add_user(self, user_id: str, name: str, email: str | None = None) -> None:
        with self._lock:
            self.users[user_id] = SlackUser(user_id, name, email)

    def add_channel(self, channel_id: str, name: str) -> None:
        with self._lock:
            self.channels[channel_id] = name

    def _next_ts(self) -> str:
        return f"{self._base}.{next(self._clock):06d}"

    def post(self, channel: str, user: str, text: str, thread_ts: str | None = None) -> SlackMessage:
        """A message in `channel` (a reply in `thread_ts`'s thread when given), as `user` wrote it."""
        with self._lock:
            if channel not in self.channels:
                raise KeyError(f"channel_not_found: {channel}")
            message = SlackMessage(channel, self._next_ts(), user, text, thread_ts)
            if thread_ts is not None:
                root = self._find(channel, thread_ts)
                if root is None:
                    raise KeyError(f"thread_not_found: {thread_ts}")
                root.thread_ts = root.thread_ts or root.ts
            self.messages.append(message)
            return message

    def _find(self, channel: str, ts: str) -> SlackMessage | None:
        return next((m for m in self.messages if m.channel == channel and m.ts == ts), None)

    def update(self, channel: str, ts: str, user: str, text: str) -> SlackMessage:
        with self._lock:
            message = self._find(channel, ts)
            if message is None:
                raise KeyError("message_not_found")
            if message.user != user:
                raise PermissionError("cant_update_message")
            message.text = text
            message.edits += 1
            return message

    def react(self, channel: str, ts: str, user: str, name: str) -> None:
        with self._lock:
            message = self._find(channel, ts)
            if message is None:
                raise KeyError("message_not_found")
            users = message.reactions.setdefault(name, [])
            if user in users:
                raise ValueError("already_reacted")
            users.append(user)

    def thread(self, channel: str, ts: str) -> list[SlackMessage]:
        """The thread whose root is `ts`: the root, then its replies in order."""
        with self._lock:
            return [m for m in self.messages if m.channel == channel and (m.ts == ts or m.thread_ts == ts)]

    def history(self, channel: str, limit: int) -> list[SlackMessage]:
        """The channel's top-level messages, newest first (as Slack gives them)."""
        with self._lock:
            top = [m for m in self.messages if m.channel == channel and (m.thread_ts is None or m.thread_ts == m.ts)]
            return list(reversed(top))[:limit]

    def fail(self, method: str, status: int, times: int = 1, retry_after: int = 1) -> None:
        """The next `times` calls of `method` answer HTTP `status` (429: with `Retry-After`)."""
        with self._lock:
            self.faults[method] = SlackFault(times, status, retry_after)

    def hold(self, method: str) -> threading.Event:
        """The next call of `method` waits until the returned event is set (or 30 s pass)."""
        gate = threading.Event()
        with self._lock:
            self.faults[method] = SlackFault(1, gate=gate)
        return gate

    def take_fault(self, method: str) -> SlackFault | None:
        """The fault the call of `method` arriving now gets, counted (None: none)."""
        with self._lock:
            fault = self.faults.get(method)
            if fault is None:
                return None
            fault.times -= 1
            if fault.times <= 0:
                del self.faults[method]
            return fault

    def record(self, call: SlackCall) -> None:
        with self._lock:
            self.calls.append(call)

    def calls_to(self, method: str) -> list[SlackCall]:
        with self._lock:
            return [call for call in self.calls if call.method == method]

    def bot_messages(self, channel: str | None = None) -> list[SlackMessage]:
        with self._lock:
            return [m for m in self.messages if m.user == self.bot_user and (channel is None or m.channel == channel)]

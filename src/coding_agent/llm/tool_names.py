"""Tool calls on the wire: function names and argument strings.

MCP tools are named `server/tool`, but OpenAI-style function names allow only
`[A-Za-z0-9_-]{1,64}`. The codec maps each real name to a legal wire name and back, so
the model sees legal names while the rest of the agent only ever sees real ones.

The encoding is chosen so that a wire name can be found from the real name alone
(`wire_candidates`): the replay model server has only the offered wire names and the
real name in its script, and must answer with the name the client offered.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Iterable
from typing import Any

from coding_agent.llm.types import Message

__all__ = [
    "ToolNameCodec",
    "UnknownToolNameError",
    "MAX_WIRE_NAME_LENGTH",
    "RAW_ARGUMENTS_KEY",
    "wire_candidates",
    "match_offered_name",
    "parse_tool_arguments",
    "CallAnswers",
]

MAX_WIRE_NAME_LENGTH = 64
_ILLEGAL = re.compile(r"[^A-Za-z0-9_-]")
_HASH_LENGTH = 8

# Arguments the model sent that are not a JSON object are kept as text under this key, so
# the reply survives and the reply protocol can tell the model what was wrong.
RAW_ARGUMENTS_KEY = "__raw_arguments__"


class UnknownToolNameError(ValueError):
    """A wire name that no offered tool encodes to (the model made one up)."""


def _plain(real: str) -> str:
    """`server/tool` -> `server__tool`, every other illegal character -> `_`."""
    return _ILLEGAL.sub("_", real.replace("/", "__"))


def _hashed(real: str) -> str:
    """The plain form cut to fit, plus a suffix that depends on the real name only."""
    digest = hashlib.sha1(real.encode("utf-8")).hexdigest()[:_HASH_LENGTH]
    stem = _plain(real)[: MAX_WIRE_NAME_LENGTH - _HASH_LENGTH - 1]
    return f"{stem}_{digest}"


def wire_candidates(real: str) -> tuple[str, ...]:
    """The wire names `real` may have been given, most likely first."""
    plain = _plain(real)
    if plain and len(plain) <= MAX_WIRE_NAME_LENGTH:
        return (plain, _hashed(real))
    return (_hashed(real),)


def match_offered_name(real: str, offered: Iterable[str]) -> str | None:
    """The offered wire name that stands for `real`, or None when none does."""
    names = set(offered)
    if real in names:
        return real
    for candidate in wire_candidates(real):
        if candidate in names:
            return candidate
    return None


class ToolNameCodec:
    """Reversible mapping of a fixed set of real tool names to legal wire names.

    A name whose plain form is legal and unique keeps it (`workspace__create`); names that
    are too long, empty, or collide with another name's plain form all get a hash suffix,
    so the result does not depend on the order the names were given in.
    """

    def __init__(self, real_names: Iterable[str]) -> None:
        reals = list(dict.fromkeys(real_names))
        plain_counts: dict[str, int] = {}
        for real in reals:
            plain_counts[_plain(real)] = plain_counts.get(_plain(real), 0) + 1
        self._to_wire: dict[str, str] = {}
        for real in reals:
            plain = _plain(real)
            legal = bool(plain) and len(plain) <= MAX_WIRE_NAME_LENGTH and plain_counts[plain] == 1
            self._to_wire[real] = plain if legal else _hashed(real)
        self._to_real: dict[str, str] = {}
        for real, wire in self._to_wire.items():
            if wire in self._to_real:  # a hash suffix equal to another name's plain form
                raise ValueError(f"tool names {self._to_real[wire]!r} and {real!r} encode to the same name {wire!r}")
            self._to_real[wire] = real

    @property
    def real_names(self) -> list[str]:
        return list(self._to_wire)

    @property
    def wire_names(self) -> list[str]:
        return list(self._to_real)

    def encode(self, real: str) -> str:
        """The wire name of `real`; a name outside the set gets its deterministic form."""
        known = self._to_wire.get(real)
        if known is not None:
            return known
        return wire_candidates(real)[0]

    def decode(self, wire: str) -> str:
        """The real name behind `wire`; a real name given as is is accepted too."""
        real = self._to_real.get(wire)
        if real is not None:
            return real
        if wire in self._to_wire:
            return wire
        offered = ", ".join(sorted(self._to_real)) or "none"
        raise UnknownToolNameError(f"unknown tool name {wire!r} (offered: {offered})")

    def decode_or_keep(self, wire: str) -> str:
        """The real name, or `wire` unchanged when the model made a name up.

        Used on replies: an unknown name is not a transport failure; the tool hub reports
        it to the model as an unknown tool, so that the model can change course.
        """
        try:
            return self.decode(wire)
        except UnknownToolNameError:
            return wire


def parse_tool_arguments(raw: object) -> dict[str, Any]:
    """Arguments of a tool call as a dict; anything that is not a JSON object is kept raw."""
    if raw is None:
        return {}
    if isinstance(raw, dict):
        return raw
    if not isinstance(raw, str):  # a server passing the model's number or list through
        return {RAW_ARGUMENTS_KEY: json.dumps(raw, ensure_ascii=False, default=str)}
    if not raw.strip():
        return {}
    try:
        value = json.loads(raw)
    except (json.JSONDecodeError, RecursionError):  # nested deeper than the stack: kept raw too
        return {RAW_ARGUMENTS_KEY: raw}
    return value if isinstance(value, dict) else {RAW_ARGUMENTS_KEY: raw}


class CallAnswers:
    """Answers, message by message, the tool calls a history leaves unanswered.

    Strict servers (OpenAI) reject a history in which a tool call is not answered before
    the next user or assistant turn. That happens when a reply was unusable (bad arguments,
    a `done` next to other calls) and the loop answered with a correction instead. Fed the
    history in order, `send` says what goes on the wire for each message: the answers of
    the calls still open when it starts another turn, then the message itself.
    """

    def __init__(self) -> None:
        self._pending: list[tuple[str, str]] = []  # (call id, name) of the last assistant turn

    def send(self, message: Message) -> list[Message]:
        if message.get("role") == "tool":
            answered = message.get("tool_call_id")
            self._pending = [(call_id, name) for call_id, name in self._pending if call_id != answered]
            return [message]
        sent: list[Message] = [
            {"role": "tool", "tool_call_id": call_id, "name": name, "content": "not run"}
            for call_id, name in self._pending
        ]
        sent.append(message)
        calls = (message.get("tool_calls") or []) if message.get("role") == "assistant" else []
        self._pending = [(str(call.get("id", "")), str(call.get("function", {}).get("name", ""))) for call in calls]
        return sent


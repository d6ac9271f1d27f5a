"""The replay model's script (served by `replay_model.py`): the steps, the
conversations and phases they are keyed on, and loading a script from a dict or a file,
with a clear error naming the bad entry.

Script format (YAML, JSON or a dict)::

    model: replay-model         # optional name reported by /v1/models and /api/tags
    latency_seconds: 0          # optional fixed delay per reply (benchmarks, the playground)
    fill:                       # optional: `{{name}}` in a reply's args, comment, text, done
      number: '#([0-9]+):'      # becomes this regex's group in the conversation's first user
                                # message ("" when it does not match); one script, any task
    replies:                    # consumed in order, per conversation
      - tool: workspace/create
        args: {path: hello.txt, content: "hi"}
        comment: "Creating the file"
      - text: "no json here"    # literal assistant text; may come with raw `tool_calls`
        tool_calls: [{name: workspace__create, arguments: "{not json"}]
      - done: "Finished: wrote hello.txt"
      - status: 503             # answer with an HTTP error, then move on
        retry_after: 1
      - raw: '{"choices": 5}'   # the HTTP body exactly as given (200), for hostile replies:
                                # bytes, or text encoded as UTF-8 with surrogateescape
      - before: {post_comment: {body: "also add a README"}}   # optional on any reply:
        tool: workspace/view    # run these registered actions when its request arrives
        args: {path: hello.txt}
    conversations:              # optional, chosen by a substring of the first user message
      - match: "#7"
        replies: [...]
    phases:                     # planning mode (SPEC 10): replies keyed on the phase marker
      planning:                 # of the latest `[Phase: ...]` line the agent sent; the longest
        - plan: {goal_understanding: {...}, action_plan: {actions: [...]}}   # key it starts with
      execution a1:             # wins ("execution a1" matches "[Phase: execution a1 (1/3)]")
        - tool: workspace/create
          args: {path: a.txt, content: "a"}
        - action_done: {id: a1, status: done, summary: "wrote a.txt"}
      reflection:
        - reflection: {status: success, evaluation: "on track", plan_revision_needed: false}
      verification:
        - verification: {verification_passed: true}
      completion:
        - done: "All done."

Phase replies (`plan`, `action_done`, `reflection`, `revision`, `verification`) become
the native phase tool (`submit_plan`, `action_done`, `submit_reflection`, ...) when the
request offers it, else the JSON-in-text object tagged by `phase`. A request with no
marker, or whose phase list is used up, takes the next of `replies`.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Literal

import yaml

__all__ = [
    "RawToolCall",
    "ReplayStep",
    "ConversationScript",
    "ReplayScript",
    "ScriptSource",
    "ScriptAction",
    "load_script",
    "PHASE_FORMS",
]

_PLACEHOLDER = re.compile(r"\{\{(\w+)\}\}")

StepKind = Literal["tool", "text", "done", "status", "raw", "plan", "action_done", "reflection", "revision", "verification"]
_PHASE_KINDS: tuple[StepKind, ...] = ("plan", "action_done", "reflection", "revision", "verification")
_KINDS: tuple[StepKind, ...] = ("tool", "text", "done", "status", "raw", *_PHASE_KINDS)
_STEP_KEYS = frozenset(
    {"tool", "args", "comment", "text", "tool_calls", "done", "status", "retry_after", "message", "raw", *_PHASE_KINDS}
)
# A phase reply: (native tool, the JSON-in-text `phase` tag; None: wrapped in its own key).
PHASE_FORMS = {
    "plan": ("submit_plan", "planning"),
    "action_done": ("action_done", None),
    "reflection": ("submit_reflection", "reflection"),
    "revision": ("submit_revision", "revision"),
    "verification": ("submit_verification", "verification"),
}

@dataclass(frozen=True)
class RawToolCall:
    """A tool call sent exactly as written (wire name, arguments possibly invalid JSON)."""

    name: str
    arguments: str | dict[str, Any]


@dataclass(frozen=True)
class ReplayStep:
    """One scripted reply."""

    kind: StepKind
    tool: str = ""
    args: dict[str, Any] = field(default_factory=dict)
    comment: str = ""
    text: str = ""
    tool_calls: tuple[RawToolCall, ...] = ()
    status: int = 0
    retry_after: float | None = None
    message: str = ""
    raw: bytes = b""
    before: tuple[tuple[str, dict[str, Any]], ...] = ()

    @classmethod
    def from_dict(cls, raw: Any, where: str) -> ReplayStep:
        if not isinstance(raw, Mapping):
            raise ValueError(f"replay script {where}: a reply must be a mapping, not {type(raw).__name__}")
        unknown = sorted(set(raw) - _STEP_KEYS)
        if unknown:
            raise ValueError(f"replay script {where}: unknown key(s) {', '.join(unknown)}")
        kinds = [kind for kind in _KINDS if kind in raw]
        if not kinds and "tool_calls" in raw:
            kinds = ["text"]
        if len(kinds) != 1:
            raise ValueError(f"replay script {where}: a reply needs exactly one of tool, text, done, status, raw")
        kind = kinds[0]
        comment = str(raw.get("comment") or "")
        if kind in _PHASE_KINDS:
            if not isinstance(raw[kind], Mapping):
                raise ValueError(f"replay script {where}: {kind} must be a mapping (the phase object)")
            return cls(kind=kind, args=dict(raw[kind]), comment=comment)
        if kind == "tool":
            args = raw.get("args") or {}
            if not isinstance(raw["tool"], str) or not isinstance(args, Mapping):
                raise ValueError(f"replay script {where}: tool must be a name and args a mapping")
            return cls(kind="tool", tool=raw["tool"], args=dict(args), comment=comment)
        if kind == "text":
            raw_calls = raw.get("tool_calls") or []
            calls = tuple(_raw_call(call, f"{where}.tool_calls[{i}]") for i, call in enumerate(raw_calls))
            return cls(kind="text", text=str(raw.get("text") or ""), tool_calls=calls)
        if kind == "raw":
            body = raw["raw"]
            if not isinstance(body, (bytes, str)):
                raise ValueError(f"replay script {where}: raw must be bytes or text")
            return cls(kind="raw", raw=body if isinstance(body, bytes) else body.encode("utf-8", "surrogateescape"))
        if kind == "done":
            done = raw["done"]
            return cls(kind="done", comment=comment if done is True or done is None else str(done))
        status = raw["status"]
        if not isinstance(status, int) or not 400 <= status <= 599:
            raise ValueError(f"replay script {where}: status must be an HTTP error code (400-599)")
        retry_after = raw.get("retry_after")
        return cls(
            kind="status",
            status=status,
            retry_after=float(retry_after) if retry_after is not None else None,
            message=str(raw.get("message") or f"replay script: scripted HTTP {status}"),
        )


def _raw_call(raw: Any, where: str) -> RawToolCall:
    if not isinstance(raw, Mapping) or not isinstance(raw.get("name"), str):
        raise ValueError(f"replay script {where}: a raw tool call needs a name")
    arguments = raw.get("arguments", {})
    if not isinstance(arguments, (str, Mapping)):
        raise ValueError(f"replay script {where}: arguments must be a string or a mapping")
    return RawToolCall(name=raw["name"], arguments=arguments if isinstance(arguments, str) else dict(arguments))


def _before(raw: Any, where: str) -> tuple[tuple[str, dict[str, Any]], ...]:
    """`before`: one mapping {action: args} or a list of them, in the order to run."""
    items = raw if isinstance(raw, list) else [raw]
    actions: list[tuple[str, dict[str, Any]]] = []
    for item in items:
        if not isinstance(item, Mapping):
            raise ValueError(f"replay script {where}.before: expected {{action: args}} mappings")
        for name, args in item.items():
            if not isinstance(args, (Mapping, type(None))):
                raise ValueError(f"replay script {where}.before.{name}: the arguments must be a mapping")
            actions.append((str(name), dict(args or {})))
    return tuple(actions)


def _step(raw: Any, where: str) -> ReplayStep:
    if isinstance(raw, Mapping) and "before" in raw:
        rest = {key: value for key, value in raw.items() if key != "before"}
        return replace(ReplayStep.from_dict(rest, where), before=_before(raw["before"], where))
    return ReplayStep.from_dict(raw, where)


def _steps(raw: Any, where: str) -> tuple[ReplayStep, ...]:
    if raw is None:
        return ()
    if not isinstance(raw, list):
        raise ValueError(f"replay script {where}: must be a list of replies")
    return tuple(_step(step, f"{where}[{index}]") for index, step in enumerate(raw))


@dataclass(frozen=True)
class ConversationScript:
    """Replies for the conversations whose first user message contains `match`."""

    match: str
    replies: tuple[ReplayStep, ...]


@dataclass(frozen=True)
class ReplayScript:
    replies: tuple[ReplayStep, ...] = ()
    conversations: tuple[ConversationScript, ...] = ()
    latency_seconds: float = 0.0
    model: str = "replay-model"
    phases: tuple[tuple[str, tuple[ReplayStep, ...]], ...] = ()
    fill: tuple[tuple[str, re.Pattern[str]], ...] = ()

    def filled(self, step: ReplayStep, first_user_message: str) -> ReplayStep:
        """`step` with each `{{name}}` of `fill` replaced by what its regex finds in the
        conversation's first user message. One pass: text found is never filled again."""
        if not self.fill:
            return step
        values = {}
        for name, pattern in self.fill:
            match = pattern.search(first_user_message)
            values[name] = match.group(1) if match is not None else ""

        def text(value: str) -> str:
            return _PLACEHOLDER.sub(lambda found: values.get(found.group(1), found.group(0)), value)

        return replace(step, args=_fill_values(step.args, text), comment=text(step.comment), text=text(step.text))

    def phase_key(self, marker: str) -> str | None:
        """The longest `phases` key the marker's text starts with."""
        keys = [key for key, _ in self.phases if marker == key or marker.startswith(key + " ")]
        return max(keys, key=len) if keys else None

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> ReplayScript:
        if not isinstance(data, Mapping):
            raise ValueError("replay script: the top level must be a mapping")
        unknown = sorted(set(data) - {"replies", "conversations", "latency_seconds", "model", "phases", "fill"})
        if unknown:
            raise ValueError(f"replay script: unknown key(s) {', '.join(unknown)}")
        conversations = []
        for index, raw in enumerate(data.get("conversations") or []):
            if not isinstance(raw, Mapping) or not isinstance(raw.get("match"), str):
                raise ValueError(f"replay script conversations[{index}]: needs a `match` string and `replies`")
            conversations.append(
                ConversationScript(raw["match"], _steps(raw.get("replies"), f"conversations[{index}].replies"))
            )
        phases = data.get("phases") or {}
        if not isinstance(phases, Mapping):
            raise ValueError("replay script phases: must map a phase marker to its replies")
        return cls(
            replies=_steps(data.get("replies"), "replies"),
            phases=tuple((str(key), _steps(steps, f"phases.{key}")) for key, steps in phases.items()),
            conversations=tuple(conversations),
            latency_seconds=float(data.get("latency_seconds") or 0),
            model=str(data.get("model") or "replay-model"),
            fill=_fill(data.get("fill")),
        )

    @classmethod
    def from_file(cls, path: str | Path) -> ReplayScript:
        """A YAML or JSON script file (JSON is YAML)."""
        return cls.from_dict(yaml.safe_load(Path(path).read_text(encoding="utf-8")) or {})

    def replies_for(self, first_user_message: str) -> tuple[ReplayStep, ...]:
        for conversation in self.conversations:
            if conversation.match in first_user_message:
                return conversation.replies
        return self.replies


def _fill(raw: Any) -> tuple[tuple[str, re.Pattern[str]], ...]:
    """`fill`: {name: regex with one group}, checked at load."""
    if raw is None:
        return ()
    if not isinstance(raw, Mapping):
        raise ValueError("replay script fill: must map a name to a regular expression")
    patterns = []
    for name, source in raw.items():
        try:
            pattern = re.compile(str(source), re.MULTILINE)
        except re.error as error:
            raise ValueError(f"replay script fill.{name}: not a regular expression ({error})") from None
        if pattern.groups != 1:
            raise ValueError(f"replay script fill.{name}: the regular expression needs exactly one group")
        patterns.append((str(name), pattern))
    return tuple(patterns)


def _fill_values(value: Any, text: Callable[[str], str]) -> Any:
    """`value` (a reply's args) with `text` applied to every string in it, at any depth."""
    if isinstance(value, str):
        return text(value)
    if isinstance(value, Mapping):
        return {key: _fill_values(item, text) for key, item in value.items()}
    if isinstance(value, list):
        return [_fill_values(item, text) for item in value]
    return value


ScriptSource = ReplayScript | Mapping[str, Any] | str | Path
# A `before` action: called with the step's arguments when that step's request arrives.
ScriptAction = Callable[[dict[str, Any]], None]


def load_script(source: ScriptSource) -> ReplayScript:
    if isinstance(source, ReplayScript):
        return source
    if isinstance(source, Mapping):
        return ReplayScript.from_dict(source)
    return ReplayScript.from_file(source)

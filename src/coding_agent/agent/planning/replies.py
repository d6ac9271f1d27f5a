"""Phase replies in both protocols (SPEC 10.2): the native phase tools and their schemas,
and finding a phase reply in what the model sent.

JSON in text: a phase object is tagged by `phase` (`action_done` by its key). Native
tool calls: `submit_plan`, `action_done`, `submit_reflection`, `submit_revision` and
`submit_verification` are offered beside `done` in every request (the same tool list
each time, so that the provider's prefix cache holds), their arguments the same objects
less `phase`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from coding_agent.llm.reply_text import JsonExtractionError, extract_json_object, strip_think
from coding_agent.llm.text_tool_calls import find_text_tool_calls
from coding_agent.llm.tool_names import RAW_ARGUMENTS_KEY
from coding_agent.llm.types import LLMReply, ToolSpec

__all__ = ["PhaseReply", "PHASE_TOOLS", "PHASE_TOOL_NAMES", "find_phase_reply", "phase_of_tool"]

_STRINGS = {"type": "array", "items": {"type": "string"}}
_COMMENT = {"type": "string", "description": "Optional: shown as the latest comment in the progress comment."}
_ACTION = {
    "type": "object",
    "properties": {
        "id": {"type": "string", "pattern": "^[A-Za-z0-9_.-]{1,32}$"},
        "subtask": {"type": "string"},
        "description": {"type": "string"},
        "tool_hints": _STRINGS,
        "expected_outcome": {"type": "string"},
    },
    "required": ["id", "description"],
}


def _tool(name: str, description: str, properties: dict[str, Any], required: list[str]) -> ToolSpec:
    schema = {"type": "object", "properties": {**properties, "comment": _COMMENT}, "required": required}
    return ToolSpec(name=name, description=description, input_schema=schema)


PHASE_TOOLS: tuple[ToolSpec, ...] = (
    _tool(
        "submit_plan",
        "Planning phase: submit the goal, the subtasks and the ordered list of actions.",
        {
            "goal_understanding": {
                "type": "object",
                "properties": {"main_objective": {"type": "string"}, "success_criteria": _STRINGS, "constraints": _STRINGS},
                "required": ["main_objective", "success_criteria"],
            },
            "task_decomposition": {
                "type": "object",
                "properties": {
                    "reasoning": {"type": "string"},
                    "subtasks": {
                        "type": "array",
                        "items": {
                            "type": "object",
                            "properties": {"id": {"type": "string"}, "description": {"type": "string"}, "dependencies": _STRINGS},
                        },
                    },
                },
            },
            "action_plan": {
                "type": "object", "properties": {"actions": {"type": "array", "items": _ACTION}}, "required": ["actions"]
            },
        },
        ["goal_understanding", "action_plan"],
    ),
    _tool(
        "action_done",
        "Execution phase: the current action is finished (done) or cannot be done (failed).",
        {"id": {"type": "string"}, "status": {"type": "string", "enum": ["done", "failed"]}, "summary": {"type": "string"}},
        ["id", "status", "summary"],
    ),
    _tool(
        "submit_reflection",
        "Reflection phase: evaluate the actions so far and say whether the plan needs a revision.",
        {
            "status": {"type": "string", "enum": ["success", "partial", "failure"]},
            "evaluation": {"type": "string"},
            "issues_identified": _STRINGS,
            "plan_revision_needed": {"type": "boolean"},
        },
        ["status", "evaluation", "plan_revision_needed"],
    ),
    _tool(
        "submit_revision",
        "Revision phase: replace every pending action (the ended ones stay as they are).",
        {"reason": {"type": "string"}, "actions": {"type": "array", "items": _ACTION}},
        ["reason", "actions"],
    ),
    _tool(
        "submit_verification",
        "Verification phase: is the task complete? Optionally add actions to fix what is missing.",
        {
            "verification_passed": {"type": "boolean"},
            "issues_found": _STRINGS,
            "placeholder_detected": {
                "type": "object",
                "properties": {"count": {"type": "integer"}, "locations": _STRINGS},
            },
            "additional_actions": {"type": "array", "items": _ACTION},
        },
        ["verification_passed"],
    ),
)

_TOOL_PHASES = {
    "submit_plan": "planning",
    "action_done": "action_done",
    "submit_reflection": "reflection",
    "submit_revision": "revision",
    "submit_verification": "verification",
}
PHASE_TOOL_NAMES = frozenset(_TOOL_PHASES)
_KINDS = frozenset({"planning", "reflection", "revision", "verification"})


def phase_of_tool(name: str) -> str | None:
    return _TOOL_PHASES.get(name)


@dataclass(frozen=True)
class PhaseReply:
    """A phase object: `kind` is planning, action_done, reflection, revision or verification.

    `problem` is set when the reply is meant as one but cannot be read (a native call's
    arguments that are not a JSON object)."""

    kind: str
    data: dict[str, Any]
    call_id: str | None = None
    problem: str | None = None

    @property
    def comment(self) -> str:
        comment = self.data.get("comment")
        return comment if isinstance(comment, str) else ""


def _from_object(data: dict[str, Any]) -> PhaseReply | None:
    if "action_done" in data:
        return PhaseReply("action_done", data)
    phase = data.get("phase")
    if isinstance(phase, str) and phase.strip().lower() in _KINDS:
        return PhaseReply(phase.strip().lower(), data)
    if isinstance(data.get("reflection"), dict):
        return PhaseReply("reflection", data)
    return None


def find_phase_reply(reply: LLMReply, native: bool) -> PhaseReply | None:
    """The phase reply in `reply`, if it is one (else it is a section-4 step)."""
    if native and reply.tool_calls:
        for call in reply.tool_calls:
            kind = phase_of_tool(call.name)
            if kind is None:
                continue
            if RAW_ARGUMENTS_KEY in call.arguments:
                return PhaseReply(kind, {}, call.id, f"the arguments of {call.name} are not a JSON object")
            data = dict(call.arguments)
            return PhaseReply(kind, {"action_done": data} if kind == "action_done" else data, call.id)
        return None
    if native:  # a phase call a server left in the text (SPEC 5.1): read as the call
        for text_call in find_text_tool_calls(reply.content, PHASE_TOOLS).calls:
            kind = phase_of_tool(text_call.name)
            if kind is not None:
                data = dict(text_call.arguments)
                return PhaseReply(kind, {"action_done": data} if kind == "action_done" else data, None)
    if not strip_think(reply.content):
        return None
    try:
        data = extract_json_object(reply.content)
    except JsonExtractionError:
        return None
    return _from_object(data)

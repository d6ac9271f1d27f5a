"""The two ways a model answers (SPEC 4): JSON in text, or native tool calls.

The agent loop talks to one `ReplyProtocol`: it puts `instructions()` in the system
prompt, calls `prepare` once, turns every reply into a `ParsedReply` with `parse`, answers
an unusable reply with `correction_message`, and hands tool output back with
`send_tool_result`. Everything protocol-specific stays in this module; reading the
reply's text (`<think>` blocks, the JSON object) is `reply_text.py`, whose names are
re-exported here.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, Protocol

from coding_agent.llm.base import LLMClient
from coding_agent.llm.hygiene import clean_value
from coding_agent.llm.reply_text import (
    JsonExtractionError,
    extract_json_object,
    strip_think,
    strip_think_blocks,
)
from coding_agent.llm.tool_names import RAW_ARGUMENTS_KEY
from coding_agent.llm.types import LLMReply, ToolSpec
from coding_agent.prompts.prompting import text

__all__ = [
    "ToolAction",
    "ParsedReply",
    "ReplyProtocol",
    "JsonTextProtocol",
    "ToolCallsProtocol",
    "JsonExtractionError",
    "DONE_TOOL",
    "create_protocol",
    "strip_think",
    "strip_think_blocks",
    "extract_json_object",
]


@dataclass(frozen=True)
class ToolAction:
    """One tool call the model asked for."""

    tool: str  # real "server/tool" name
    args: dict[str, Any]
    call_id: str | None  # native tool-call id (None in the JSON-text protocol)


@dataclass(frozen=True)
class ParsedReply:
    """What the model decided in one reply.

    `done` with `actions` (a tool call next to `done`) means: run the actions, then
    finish. `error` marks an unusable reply: no actions, not done; the loop answers with
    `correction_message(error)`.
    """

    comment: str  # text to post on the issue (<think> blocks removed); may be ""
    actions: tuple[ToolAction, ...]  # tool calls to run, in order (JSON protocol: 0 or 1)
    done: bool
    error: str | None = None


class ReplyProtocol(Protocol):
    name: str  # "json_text" | "tool_calls"
    uses_native_tools: bool

    def instructions(self) -> str:
        """How to reply, for the system prompt."""
        ...

    def prepare(self, llm: LLMClient, tools: list[ToolSpec]) -> None:
        """Offer the tools natively (tool_calls) or not at all (json_text)."""
        ...

    def parse(self, reply: LLMReply) -> ParsedReply: ...

    def correction_message(self, error: str) -> str:
        """A short user message asking the model to fix its reply."""
        ...

    def send_tool_result(self, llm: LLMClient, action: ToolAction, output: str, is_error: bool) -> None: ...


# --- JSON in text ---------------------------------------------------------------------

_JSON_INSTRUCTIONS = text("protocol/json_instructions.j2")
_JSON_REMINDER = text("protocol/json_reminder.j2")

def _truthy(value: Any) -> bool:
    return value is True or (isinstance(value, str) and value.strip().lower() == "true")


def _text(value: Any) -> str:
    if value is None:
        return ""
    return value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)


def _command_action(command: Any) -> ToolAction:
    """The `command` of a JSON reply as an action; ValueError says what is wrong with it."""
    if not isinstance(command, dict):
        raise ValueError('"command" must be an object {"tool": "<server>/<tool>", "args": {...}}')
    tool = command.get("tool")
    if not isinstance(tool, str) or not tool.strip():
        raise ValueError('"command.tool" must be a tool name like "<server>/<tool>"')
    args = command.get("args", command.get("arguments", {}))
    if isinstance(args, str):
        try:
            args = json.loads(args) if args.strip() else {}
        except json.JSONDecodeError:
            pass
    if args is None:
        args = {}
    if not isinstance(args, dict):
        raise ValueError('"command.args" must be an object of the tool\'s arguments')
    return ToolAction(tool=tool.strip(), args=args, call_id=None)


class JsonTextProtocol:
    """For models without tool calling: one JSON object per reply (seed 003 section 8)."""

    name = "json_text"
    uses_native_tools = False

    def instructions(self) -> str:
        return _JSON_INSTRUCTIONS

    def prepare(self, llm: LLMClient, tools: list[ToolSpec]) -> None:
        llm.set_tools([])  # the tools are described in the system prompt instead

    def parse(self, reply: LLMReply) -> ParsedReply:
        if reply.problem:
            return ParsedReply(comment="", actions=(), done=False, error=reply.problem)
        try:
            data = clean_value(extract_json_object(reply.content))  # "\u0000" decodes to NUL
        except JsonExtractionError as error:
            return ParsedReply(comment="", actions=(), done=False, error=str(error))
        command = strip_think_blocks(data.get("command"))
        comment = data.get("comment")
        if comment is None and isinstance(command, dict):
            comment = command.get("comment")
        comment = strip_think(_text(comment))
        if _truthy(data.get("done")):
            actions: tuple[ToolAction, ...] = ()
            if command is not None:
                try:
                    actions = (_command_action(command),)
                except ValueError:
                    actions = ()
            return ParsedReply(comment=comment, actions=actions, done=True)
        if command is None:
            return ParsedReply(comment="", actions=(), done=False, error='the JSON has neither "command" nor "done": true')
        try:
            action = _command_action(command)
        except ValueError as error:
            return ParsedReply(comment="", actions=(), done=False, error=str(error))
        return ParsedReply(comment=comment, actions=(action,), done=False)

    def correction_message(self, error: str) -> str:
        return text("protocol/json_correction.j2", error=error, instructions=_JSON_INSTRUCTIONS)

    def send_tool_result(self, llm: LLMClient, action: ToolAction, output: str, is_error: bool) -> None:
        previous = {"tool": action.tool, "args": action.args, "is_error": is_error, "output": output}
        payload = json.dumps({"previous_output": previous}, ensure_ascii=False, indent=2)
        llm.send_user_message(f"{payload}\n{_JSON_REMINDER}")


# --- native tool calls ----------------------------------------------------------------

DONE_TOOL = ToolSpec(
    name="done",
    description=text("protocol/done_tool.j2"),
    input_schema={
        "type": "object",
        "properties": {"comment": {"type": "string", "description": text("protocol/done_comment.j2")}},
        "required": ["comment"],
    },
)

_TOOL_INSTRUCTIONS = text("protocol/tool_instructions.j2")

class ToolCallsProtocol:
    """For models with native tool calling: the MCP tools plus a `done` function."""

    name = "tool_calls"
    uses_native_tools = True

    def instructions(self) -> str:
        return _TOOL_INSTRUCTIONS

    def prepare(self, llm: LLMClient, tools: list[ToolSpec]) -> None:
        llm.set_tools([*(tool for tool in tools if tool.name != DONE_TOOL.name), DONE_TOOL])

    def parse(self, reply: LLMReply) -> ParsedReply:
        if reply.problem:
            return ParsedReply(comment="", actions=(), done=False, error=reply.problem)
        text = strip_think(reply.content)
        if not reply.tool_calls:
            if not text:
                return ParsedReply(comment="", actions=(), done=False, error="the reply had neither a tool call nor text")
            return ParsedReply(comment=text, actions=(), done=True)  # a final message ends the task
        problems: list[str] = []
        actions: list[ToolAction] = []
        done_comment: str | None = None
        for call in reply.tool_calls:
            if RAW_ARGUMENTS_KEY in call.arguments:
                raw = str(call.arguments[RAW_ARGUMENTS_KEY])
                problems.append(f"the arguments of {call.name} are not a JSON object: {raw[:200]}")
            elif call.name == DONE_TOOL.name:
                done_comment = strip_think(_text(call.arguments.get("comment")))
            else:
                actions.append(ToolAction(tool=call.name, args=strip_think_blocks(dict(call.arguments)), call_id=call.id))
        if problems:
            return ParsedReply(comment="", actions=(), done=False, error="; ".join(problems))
        if done_comment is not None:
            return ParsedReply(comment=done_comment or text, actions=tuple(actions), done=True)
        return ParsedReply(comment=text, actions=tuple(actions), done=False)

    def correction_message(self, error: str) -> str:
        return text("protocol/tool_correction.j2", error=error)

    def send_tool_result(self, llm: LLMClient, action: ToolAction, output: str, is_error: bool) -> None:
        text = f"[error] {output}" if is_error else output
        if action.call_id is None:  # not a native call: nothing to pair the answer with
            llm.send_user_message(f"Output of {action.tool}:\n{text}")
            return
        llm.send_tool_result(action.call_id, action.tool, text)


def create_protocol(function_calling: bool) -> ReplyProtocol:
    """The protocol for `llm.function_calling`."""
    return ToolCallsProtocol() if function_calling else JsonTextProtocol()

"""The two ways a model answers (SPEC 4): JSON in text, or native tool calls.

The agent loop talks to one `ReplyProtocol`: it puts `instructions()` in the system
prompt, calls `prepare` once, turns every reply into a `ParsedReply` with `parse`, answers
an unusable reply with `correction_message`, and hands tool output back with
`send_tool_result`. Everything protocol-specific stays in this module; reading the
reply's text (`<think>` blocks, the JSON object) is `reply_text.py`, whose names are
re-exported here. Tool calls a model wrote as text in its own family's format (a
server without a tool parser passes them through) are read by `text_tool_calls.py` in
both protocols; markup that cannot be read is corrected, and never posted.
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass
from typing import Any, Protocol

from coding_agent.llm.base import LLMClient
from coding_agent.llm.hygiene import clean_value
from coding_agent.llm.reply_text import (
    JsonExtractionError,
    extract_json_object,
    repair_json_object,
    strip_think,
    strip_think_blocks,
)
from coding_agent.llm.text_tool_calls import TextToolCalls, find_text_tool_calls, format_label, tool_call_markup
from coding_agent.llm.tool_names import RAW_ARGUMENTS_KEY
from coding_agent.llm.types import LLMReply, ToolSpec
from coding_agent.prompts.prompting import text

log = logging.getLogger(__name__)

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
_PREVIOUS_OUTPUT = '{\n  "previous_output"'  # how a JSON tool result starts (json.dumps, indent 2)
_TEXT_CALL_OUTPUT = "Output of "  # how the result of a call written as text starts
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
        except (json.JSONDecodeError, RecursionError):  # said below: not an object
            pass
    if args is None:
        args = {}
    if not isinstance(args, dict):
        raise ValueError('"command.args" must be an object of the tool\'s arguments')
    return ToolAction(tool=tool.strip(), args=args, call_id=None)


def _markup_problem(comment: str) -> str | None:
    """Why `comment` may not be posted: it holds raw tool-call markup (SPEC 5.1)."""
    marker = tool_call_markup(comment)
    if marker is None:
        return None
    return f"the answer holds raw tool-call markup ({marker}); call the tool properly, or answer without the markup"


class _FormatNotice:
    """One log line per run and format: the calls came as text (the operator may want a
    tool parser on the server), without a line on every step."""

    def __init__(self) -> None:
        self._seen: set[str] = set()

    def __call__(self, found: TextToolCalls, protocol: str) -> None:
        if found.calls and found.format not in self._seen:
            self._seen.add(found.format)
            log.info(
                "%s: the model's tool calls come as text in the %s format (read as calls; "
                "the server passes them through without a tool parser)",
                protocol,
                format_label(found.format),
            )


def _text_calls(found: TextToolCalls, done_name: str | None) -> ParsedReply:
    """The calls read from a reply's text as a decision; `done_name` is the `done` tool's
    name when one is offered (native protocol)."""
    if found.problem is not None:
        return ParsedReply(comment="", actions=(), done=False, error=found.problem)
    actions: list[ToolAction] = []
    done_comment: str | None = None
    for call in found.calls:
        if done_name is not None and call.name == done_name:
            done_comment = strip_think(_text(call.arguments.get("comment")))
        else:
            actions.append(ToolAction(tool=call.name, args=strip_think_blocks(clean_value(call.arguments)), call_id=None))
    comment = found.text
    if done_comment is not None or not actions:
        final = done_comment or comment
        if not final:
            return ParsedReply(comment="", actions=(), done=False, error="the reply had neither a tool call nor text")
        problem = _markup_problem(final)
        if problem is not None:
            return ParsedReply(comment="", actions=(), done=False, error=problem)
        return ParsedReply(comment=final, actions=tuple(actions), done=True)
    return ParsedReply(comment="" if _markup_problem(comment) else comment, actions=tuple(actions), done=False)


class JsonTextProtocol:
    """For models without tool calling: one JSON object per reply (seed 003 section 8).

    A reply that holds no such object is read, in this order, as a tool call in the
    model's own trained format (any family `text_tool_calls.py` knows), then as JSON
    mended by `repair_json_object`; only then is it corrected.
    """

    name = "json_text"
    uses_native_tools = False

    def __init__(self) -> None:
        self._tools: tuple[ToolSpec, ...] = ()
        self._notice = _FormatNotice()

    def instructions(self) -> str:
        return _JSON_INSTRUCTIONS

    def prepare(self, llm: LLMClient, tools: list[ToolSpec]) -> None:
        llm.set_tools([])  # the tools are described in the system prompt instead
        self._tools = tuple(tools)

    def parse(self, reply: LLMReply) -> ParsedReply:
        if reply.problem:
            return ParsedReply(comment="", actions=(), done=False, error=reply.problem)
        data: dict[str, Any] | None
        try:
            data = extract_json_object(reply.content)
        except JsonExtractionError as error:
            data, problem = None, str(error)
        else:
            problem = 'the JSON has neither "command" nor "done": true'
        if data is None or not ({"command", "done"} & data.keys()):
            found = find_text_tool_calls(reply.content, [*self._tools, DONE_TOOL])  # `done` as the model's own call
            if found.calls or found.problem is not None:
                self._notice(found, self.name)
                return _text_calls(found, DONE_TOOL.name)
            data = repair_json_object(reply.content) or data
        if data is None:
            return ParsedReply(comment="", actions=(), done=False, error=problem)
        data = clean_value(data)  # "\u0000" decodes to NUL
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
            markup = _markup_problem(comment)
            if markup is not None:
                return ParsedReply(comment="", actions=(), done=False, error=markup)
            return ParsedReply(comment=comment, actions=actions, done=True)
        if command is None:
            return ParsedReply(comment="", actions=(), done=False, error='the JSON has neither "command" nor "done": true')
        try:
            action = _command_action(command)
        except ValueError as error:
            return ParsedReply(comment="", actions=(), done=False, error=str(error))
        return ParsedReply(comment="" if _markup_problem(comment) else comment, actions=(action,), done=False)

    def correction_message(self, error: str) -> str:
        return text("protocol/json_correction.j2", error=error, instructions=_JSON_INSTRUCTIONS)

    def send_tool_result(self, llm: LLMClient, action: ToolAction, output: str, is_error: bool) -> None:
        previous = {"tool": action.tool, "args": action.args, "is_error": is_error, "output": output}
        payload = json.dumps({"previous_output": previous}, ensure_ascii=False, indent=2)
        llm.send_user_message(f"{payload}\n{_JSON_REMINDER}", join=_PREVIOUS_OUTPUT)  # several calls of one reply: one turn


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
    """For models with native tool calling: the MCP tools plus a `done` function.

    A reply without structured calls is read for calls written as text (a server without
    a tool parser passes them through); plain text is the final answer, unless it holds
    tool-call markup, which is corrected and never posted.
    """

    name = "tool_calls"
    uses_native_tools = True

    def __init__(self) -> None:
        self._tools: tuple[ToolSpec, ...] = (DONE_TOOL,)
        self._notice = _FormatNotice()

    def instructions(self) -> str:
        return _TOOL_INSTRUCTIONS

    def prepare(self, llm: LLMClient, tools: list[ToolSpec]) -> None:
        offered = [*(tool for tool in tools if tool.name != DONE_TOOL.name), DONE_TOOL]
        llm.set_tools(offered)
        self._tools = tuple(offered)

    def parse(self, reply: LLMReply) -> ParsedReply:
        if reply.problem:
            return ParsedReply(comment="", actions=(), done=False, error=reply.problem)
        if not reply.tool_calls:  # a final message ends the task, unless it holds calls
            found = find_text_tool_calls(reply.content, self._tools)
            self._notice(found, self.name)
            return _text_calls(found, DONE_TOOL.name)
        text = strip_think(reply.content)
        if _markup_problem(text) is not None:
            text = ""  # markup beside structured calls: never posted
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
            final = done_comment or text
            markup = _markup_problem(final)
            if markup is not None:
                return ParsedReply(comment="", actions=(), done=False, error=markup)
            return ParsedReply(comment=final, actions=tuple(actions), done=True)
        return ParsedReply(comment=text, actions=tuple(actions), done=False)

    def correction_message(self, error: str) -> str:
        return text("protocol/tool_correction.j2", error=error)

    def send_tool_result(self, llm: LLMClient, action: ToolAction, output: str, is_error: bool) -> None:
        text = f"[error] {output}" if is_error else output
        if action.call_id is None:  # a call written as text: nothing to pair the answer with
            llm.send_user_message(f"{_TEXT_CALL_OUTPUT}{action.tool}:\n{text}", join=_TEXT_CALL_OUTPUT)
            return
        llm.send_tool_result(action.call_id, action.tool, text)


def create_protocol(function_calling: bool) -> ReplyProtocol:
    """The protocol for `llm.function_calling`."""
    return ToolCallsProtocol() if function_calling else JsonTextProtocol()

"""Tool calls a model wrote as text (SPEC 5.1), read as the calls they are.

Servers often leave a model's tool calls in its reply text: vLLM without a tool parser,
llama.cpp without `--jinja`, an Ollama or LM Studio template that does not know the
model's format. Each open-model family writes its calls its own way; this module reads
them all, one small parser per format, tried in a fixed order (`_PARSERS`), after the
reasoning (`<think>`, harmony's `analysis` channel, Command R's thinking) is dropped.

`find_text_tool_calls(text, tools)` is the one entry point (the reply protocols and
`doctor`'s model probe use it; its name and signature are kept stable). Its answer says
which format was found (`format`), the calls in order, the prose left around them, or
the `problem` that makes markup unreadable (an unknown tool, arguments that are not a
JSON object): the protocols answer that with a correction, never with a final answer.

Bare JSON (Llama 3 `{"name", "parameters"}`, xLAM lists) and bare pythonic lists have no
markup of their own, so they count only when every name in them is an offered tool: a
final answer that shows an example object stays an answer.

Every parser is linear in the text: markers are found with `str.find`, JSON values are
read with `json.JSONDecoder.raw_decode` from a known start, pythonic lists by a bracket
scan and `ast` (never `eval`); and the two small regular expressions (pythonic tokens) are anchored on one character
and cannot backtrack.
"""

from __future__ import annotations

import ast
import json
import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from coding_agent.llm.reply_text import strip_think
from coding_agent.llm.tool_names import ToolNameCodec
from coding_agent.llm.types import ToolSpec

__all__ = [
    "TextToolCall",
    "TextToolCalls",
    "find_text_tool_calls",
    "tool_call_markup",
    "format_label",
    "FORMATS",
]

_DECODER = json.JSONDecoder(strict=False)
_MAX_BARE_CANDIDATES = 64  # `"name"` keys tried as bare JSON calls: a bound on pathological replies


@dataclass(frozen=True)
class TextToolCall:
    """One call read from text: `name` is the offered tool's real name (`server/tool`)."""

    name: str
    arguments: dict[str, Any]


@dataclass(frozen=True)
class TextToolCalls:
    """What a reply's text holds.

    `format` names the format found ("" when the text holds no tool-call markup);
    `calls` are in the order written; `text` is the reply without reasoning and without
    the markup (the prose to post); `problem` says why markup found could not be read.
    """

    format: str = ""
    calls: tuple[TextToolCall, ...] = ()
    text: str = ""
    problem: str | None = None

    def __bool__(self) -> bool:
        return bool(self.format)


class _Unreadable(ValueError):
    """Markup of a known format that cannot be read; the message is for the model."""


@dataclass
class _Raw:
    """A call as written: the name as the model spelled it, arguments as found."""

    name: Any
    arguments: Any
    typed: bool = True  # False: values are text (XML formats) and converted by schema


@dataclass
class _Found:
    calls: list[_Raw]
    text: str  # the prose around the markup
    bare: bool = False  # no markup of its own: counts only with offered names
    format: str = ""
    answer_only: bool = False  # markup that may hold an answer and no call (harmony `final`)


# --- small readers --------------------------------------------------------------------


def _skip_space(text: str, index: int) -> int:
    length = len(text)
    while index < length and text[index] in " \t\r\n":
        index += 1
    return index


def _json_at(text: str, index: int) -> tuple[Any, int]:
    """The JSON value starting at `index` (after whitespace) and the index after it."""
    index = _skip_space(text, index)
    try:
        return _DECODER.raw_decode(text, index)
    except json.JSONDecodeError as error:
        snippet = text[index : index + 80].strip()
        raise _Unreadable(f"the arguments are not JSON ({error.msg}): {snippet!r}") from None
    except RecursionError:  # nesting deeper than the interpreter's stack: hostile, not a call
        raise _Unreadable("the arguments are not JSON (nested too deep)") from None


def _between(text: str, start: str, end: str, index: int = 0) -> tuple[int, int, int] | None:
    """(content start, content end, index after `end`) of the next `start ... end`; an
    `end` never written runs to the end of the text (a reply cut off or a stop token)."""
    opening = text.find(start, index)
    if opening == -1:
        return None
    begin = opening + len(start)
    closing = text.find(end, begin)
    if closing == -1:
        return begin, len(text), len(text)
    return begin, closing, closing + len(end)


def _call_of(item: Any) -> _Raw:
    """A call from a JSON object in any of the shapes families use."""
    if not isinstance(item, dict):
        raise _Unreadable(f"a tool call must be a JSON object with a name, not {json.dumps(item)[:80]}")
    function = item.get("function")
    if isinstance(function, dict):  # OpenAI's own shape, written out as text
        item = function
    name = item.get("name", item.get("tool_name", function if isinstance(function, str) else None))
    for key in ("arguments", "parameters", "args", "input"):
        if key in item:
            return _Raw(name, item[key])
    return _Raw(name, {})


def _calls_of(value: Any) -> list[_Raw]:
    items = value if isinstance(value, list) else [value]
    return [_call_of(item) for item in items]


def _prose(text: str, spans: list[tuple[int, int]]) -> str:
    """`text` without the markup spans, the pieces left one per line."""
    kept, position = [], 0
    for start, end in sorted(spans):
        kept.append(text[position:start])
        position = max(position, end)
    kept.append(text[position:])
    return "\n".join(piece.strip() for piece in kept if piece.strip())


# --- one parser per format ------------------------------------------------------------
# Each takes the reply text (reasoning already dropped) and returns None when its format
# is not there, or what it found; markup it cannot read raises `_Unreadable`.


def _harmony(text: str) -> _Found | None:
    """gpt-oss harmony: `<|channel|>commentary to=functions.NAME <|constrain|>json<|message|>{...}<|call|>`.

    The `analysis` channel is reasoning and dropped; the `final` channel is the answer."""
    if "<|channel|>" not in text and "to=functions." not in text:
        return None
    calls: list[_Raw] = []
    answer: list[str] = []
    for part in text.split("<|start|>"):
        header_end = part.find("<|message|>")
        header, body = (part, "") if header_end == -1 else (part[:header_end], part[header_end + len("<|message|>") :])
        for stop in ("<|call|>", "<|end|>", "<|return|>"):
            cut = body.find(stop)
            if cut != -1:
                body = body[:cut]
        recipient = header.find("to=functions.")
        if recipient != -1:
            name_start = recipient + len("to=functions.")
            name_end = name_start
            while name_end < len(header) and header[name_end] not in " \t\r\n<":
                name_end += 1
            arguments, _ = _json_at(body, 0) if body.strip() else ({}, 0)
            calls.append(_Raw(header[name_start:name_end], arguments))
        elif "<|channel|>final" in header:
            answer.append(body)
        elif "<|channel|>" not in header and "<|message|>" not in part:
            answer.append(part)  # text outside any harmony message
    if not calls and "<|channel|>" not in text:
        return None
    return _Found(calls, "\n".join(chunk.strip() for chunk in answer if chunk.strip()), answer_only=True)


_DS_CALLS_BEGIN, _DS_CALLS_END = "<｜tool▁calls▁begin｜>", "<｜tool▁calls▁end｜>"
_DS_CALL_BEGIN, _DS_CALL_END, _DS_SEP = "<｜tool▁call▁begin｜>", "<｜tool▁call▁end｜>", "<｜tool▁sep｜>"


def _deepseek(text: str) -> _Found | None:
    """DeepSeek V3/R1 (`function<｜tool▁sep｜>NAME` and a ```json fence) and V3.1
    (`NAME<｜tool▁sep｜>{json}`), between `<｜tool▁call▁begin｜>` and `<｜tool▁call▁end｜>`."""
    first = text.find(_DS_CALLS_BEGIN)
    if first == -1:
        first = text.find(_DS_CALL_BEGIN)
    if first == -1:
        return None
    calls: list[_Raw] = []
    index = first
    while (found := _between(text, _DS_CALL_BEGIN, _DS_CALL_END, index)) is not None:
        begin, end, index = found
        chunk = text[begin:end]
        separator = chunk.find(_DS_SEP)
        if separator == -1:
            raise _Unreadable(f"a DeepSeek tool call without {_DS_SEP}: {chunk[:80]!r}")
        left, right = chunk[:separator].strip(), chunk[separator + len(_DS_SEP) :]
        if left == "function":  # V3 / R1: the name on the first line, the JSON in a fence
            newline = right.find("\n")
            name, rest = (right, "") if newline == -1 else (right[:newline], right[newline + 1 :])
            fence = rest.find("```json")
            rest = rest[fence + len("```json") :] if fence != -1 else rest
            closing = rest.rfind("```")
            rest = rest[:closing] if closing != -1 else rest
            calls.append(_Raw(name.strip(), _json_at(rest, 0)[0] if rest.strip() else {}))
        else:  # V3.1
            calls.append(_Raw(left, _json_at(right, 0)[0] if right.strip() else {}))
    if not calls:
        raise _Unreadable(f"{_DS_CALLS_BEGIN} holds no readable tool call")
    closing = text.find(_DS_CALLS_END, first)
    stop = max(index, closing + len(_DS_CALLS_END)) if closing != -1 else index
    return _Found(calls, _prose(text, [(first, stop)]))


def _kimi(text: str) -> _Found | None:
    """Kimi K2: `<|tool_call_begin|>functions.NAME:0<|tool_call_argument_begin|>{...}<|tool_call_end|>`
    inside `<|tool_calls_section_begin|> ... <|tool_calls_section_end|>`."""
    first = text.find("<|tool_calls_section_begin|>")
    if first == -1:
        first = text.find("<|tool_call_begin|>")
    if first == -1:
        return None
    calls: list[_Raw] = []
    index = first
    while (found := _between(text, "<|tool_call_begin|>", "<|tool_call_end|>", index)) is not None:
        begin, end, index = found
        chunk = text[begin:end]
        separator = chunk.find("<|tool_call_argument_begin|>")
        if separator == -1:
            raise _Unreadable(f"a Kimi tool call without <|tool_call_argument_begin|>: {chunk[:80]!r}")
        name = chunk[:separator].strip()
        colon = name.rfind(":")
        if colon != -1 and name[colon + 1 :].isdigit():
            name = name[:colon]
        arguments = chunk[separator + len("<|tool_call_argument_begin|>") :]
        calls.append(_Raw(name, _json_at(arguments, 0)[0] if arguments.strip() else {}))
    closing = text.find("<|tool_calls_section_end|>", index)
    stop = closing + len("<|tool_calls_section_end|>") if closing != -1 else index
    return _Found(calls, _prose(text, [(first, stop)]))


def _command_r(text: str) -> _Found | None:
    """Command R/R+/A: `<|START_ACTION|>[{"tool_call_id", "tool_name", "parameters"}]<|END_ACTION|>`;
    `<|START_THINKING|>` is reasoning, `<|START_RESPONSE|>` the answer."""
    if "<|START_ACTION|>" not in text and "<|START_RESPONSE|>" not in text and "<|START_THINKING|>" not in text:
        return None
    spans: list[tuple[int, int]] = []
    thinking = _between(text, "<|START_THINKING|>", "<|END_THINKING|>")
    if thinking is not None:
        spans.append((text.find("<|START_THINKING|>"), thinking[2]))
    calls: list[_Raw] = []
    index = 0
    while (found := _between(text, "<|START_ACTION|>", "<|END_ACTION|>", index)) is not None:
        begin, end, index = found
        calls.extend(_calls_of(_json_at(text[begin:end], 0)[0]))
        spans.append((begin - len("<|START_ACTION|>"), index))
    prose = _prose(text, spans).replace("<|START_RESPONSE|>", "").replace("<|END_RESPONSE|>", "")
    return _Found(calls, prose.strip(), answer_only=True)


def _marker_then_json(marker: str, closing: str | None, keep: int = 0) -> Callable[[str], _Found | None]:
    """Formats that are one marker followed by JSON (an object or a list of calls); the
    last `keep` characters of the marker open the JSON (Phi-4's `functools[`)."""

    def parse(text: str) -> _Found | None:
        first = text.find(marker)
        if first == -1:
            return None
        calls: list[_Raw] = []
        spans: list[tuple[int, int]] = []
        index = first
        while (start := text.find(marker, index)) != -1:
            value, end = _json_at(text, start + len(marker) - keep)
            calls.extend(_calls_of(value))
            end = _skip_space(text, end)
            while text.startswith(";", end):  # Llama 3 writes several calls separated by `;`
                value, end = _json_at(text, end + 1)
                calls.extend(_calls_of(value))
                end = _skip_space(text, end)
            if closing is not None and text.startswith(closing, end):
                end += len(closing)
            spans.append((start, end))
            index = end
        return _Found(calls, _prose(text, spans))

    return parse


def _mistral(text: str) -> _Found | None:
    """Mistral: `[TOOL_CALLS]` then a JSON list, `NAME{json}` (v11) or `NAME[ARGS]{json}`
    (v13), one marker per call or several calls after one."""
    first = text.find("[TOOL_CALLS]")
    if first == -1:
        return None
    calls: list[_Raw] = []
    index = first
    while text.startswith("[TOOL_CALLS]", index):
        index = _skip_space(text, index + len("[TOOL_CALLS]"))
        if text.startswith(("[", "{"), index):
            value, index = _json_at(text, index)
            calls.extend(_calls_of(value))
        else:
            while index < len(text) and text[index] not in "[{ \t\r\n":
                name_end = index
                while name_end < len(text) and text[name_end] not in "[{ \t\r\n":
                    name_end += 1
                name = text[index:name_end]
                index = name_end
                if text.startswith("[CALL_ID]", index):
                    found = text.find("[ARGS]", index)
                    index = len(text) if found == -1 else found
                if text.startswith("[ARGS]", index):
                    index += len("[ARGS]")
                value, index = _json_at(text, index)
                calls.append(_Raw(name, value))
            if not calls:
                raise _Unreadable("[TOOL_CALLS] must be followed by NAME{json} or a JSON list of calls")
        index = _skip_space(text, index)
    return _Found(calls, _prose(text, [(first, index)]))


# One token of a pythonic call list: a quoted string (escapes respected, on one line; the
# loop unrolled, so a run of plain characters is one step) or a bracket. Each alternative
# is anchored on its first character and its parts cannot overlap: the scan is linear.
_PY_TOKEN = re.compile(r"""'[^'\\\n]*(?:\\.[^'\\\n]*)*'|"[^"\\\n]*(?:\\.[^"\\\n]*)*"|[\[\](){}]""")
_PY_LIST_START = re.compile(r"\[\s*[A-Za-z_][\w.\-]*\(")


class _Budget:
    """Characters the pythonic scans of one reply may still read: a bound of twice the
    reply on all of them together, so that candidates that never close (`[f(` repeated)
    cannot make the search quadratic."""

    def __init__(self, text: str) -> None:
        self.left = 2 * len(text) + 4096


def _python_call_list(text: str, start: int, budget: _Budget | None = None) -> tuple[list[_Raw], int] | None:
    """The pythonic list `[f(a=1), g(b="x")]` opening at `start`, read with `ast`;
    None when the bracket never closes (or the budget runs out first) or the text there
    is not a list of calls."""
    budget = budget or _Budget(text)
    depth = 0
    for token in _PY_TOKEN.finditer(text, start):
        if token.end() - start > budget.left:
            budget.left = 0
            return None
        char = token.group()
        if char in "[({":
            depth += 1
        elif char in "])}":
            depth -= 1
            if depth == 0:
                index = token.start()
                break
    else:
        budget.left -= len(text) - start
        return None
    budget.left -= index + 1 - start
    source = text[start : index + 1]
    try:
        tree = ast.parse(source, mode="eval").body
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return None
    if not isinstance(tree, ast.List) or not tree.elts or not all(isinstance(node, ast.Call) for node in tree.elts):
        return None
    calls: list[_Raw] = []
    for node in tree.elts:
        assert isinstance(node, ast.Call)
        name = ast.unparse(node.func)
        try:
            arguments = {keyword.arg: ast.literal_eval(keyword.value) for keyword in node.keywords if keyword.arg}
        except (ValueError, TypeError, SyntaxError, RecursionError, MemoryError):
            raise _Unreadable(f"the arguments of {name} are not literal values: {source[:120]!r}") from None
        if node.args or any(keyword.arg is None for keyword in node.keywords):
            raise _Unreadable(f"call {name} with keyword arguments only, as name=value: {source[:120]!r}")
        calls.append(_Raw(name, arguments))
    return calls, index + 1


def _llama4(text: str) -> _Found | None:
    """Llama 4: `<|python_start|>[get_weather(city='LA')]<|python_end|>`."""
    start = text.find("<|python_start|>")
    if start == -1:
        return None
    begin = _skip_space(text, start + len("<|python_start|>"))
    if text.startswith("{", begin):  # some Llama 4 templates write JSON there
        return _marker_then_json("<|python_start|>", "<|python_end|>")(text)
    read = _python_call_list(text, begin) if text.startswith("[", begin) else None
    if read is None:
        raise _Unreadable("<|python_start|> must be followed by a list of calls like [name(key=value)]")
    calls, end = read
    end = _skip_space(text, end)
    if text.startswith("<|python_end|>", end):
        end += len("<|python_end|>")
    return _Found(calls, _prose(text, [(start, end)]))


def _tool_call_tags(text: str) -> _Found | None:
    """`<tool_call>...</tool_call>`: Hermes/Qwen JSON, Qwen3-Coder `<function=NAME>` with
    `<parameter=KEY>`, GLM 4.5 `NAME` with `<arg_key>`/`<arg_value>`, and Granite 3.1's
    JSON list; also a bare `<function=NAME>` block (Qwen3-Coder without the outer tag)."""
    if "<tool_call>" not in text:
        return _qwen3_coder_blocks(text, 0, len(text)) if "<function=" in text else None
    calls: list[_Raw] = []
    spans: list[tuple[int, int]] = []
    kind = ""
    index = 0
    while (found := _between(text, "<tool_call>", "</tool_call>", index)) is not None:
        begin, end, index = found
        spans.append((begin - len("<tool_call>"), index))
        body = text[begin:end]
        head = _skip_space(body, 0)
        if body.startswith("<function=", head):
            block = _qwen3_coder_blocks(body, head, len(body))
            assert block is not None
            calls.extend(block.calls)
            kind = kind or "qwen3_coder"
        elif body.startswith("{", head) or body.startswith("[", head):
            calls.extend(_calls_of(_json_at(body, head)[0]))
            kind = kind or ("granite" if body.startswith("[", head) else "hermes")
        elif "<arg_key>" in body or body.strip():
            calls.append(_glm_call(body))
            kind = kind or "glm45"
        else:
            raise _Unreadable("an empty <tool_call></tool_call>")
    return _Found(calls, _prose(text, spans), format=kind)


def _qwen3_coder_blocks(text: str, start: int, stop: int) -> _Found | None:
    calls: list[_Raw] = []
    spans: list[tuple[int, int]] = []
    index = start
    while (opening := text.find("<function=", index, stop)) != -1:
        name_end = text.find(">", opening)
        if name_end == -1 or name_end > stop:
            raise _Unreadable(f"<function=NAME> is not closed with '>': {text[opening:opening + 80]!r}")
        name = text[opening + len("<function=") : name_end].strip()
        closing = text.find("</function>", name_end, stop)
        body_end = stop if closing == -1 else closing
        arguments: dict[str, Any] = {}
        position = name_end
        head = _skip_space(text, name_end + 1)
        if text.startswith("{", head) and text.find("<parameter=", head, body_end) == -1:
            value, _ = _json_at(text[:body_end], head)  # Llama 3.1's `<function=NAME>{json}</function>`
            calls.append(_Raw(name, value))
            index = body_end + (len("</function>") if closing != -1 else 0)
            spans.append((opening, index))
            continue
        while (parameter := text.find("<parameter=", position, body_end)) != -1:
            key_end = text.find(">", parameter, body_end)
            if key_end == -1:
                raise _Unreadable(f"<parameter=KEY> is not closed with '>' in {name}")
            key = text[parameter + len("<parameter=") : key_end].strip()
            next_parameter = text.find("<parameter=", key_end, body_end)
            limit = body_end if next_parameter == -1 else next_parameter  # each find stays in its own span
            value_end = text.find("</parameter>", key_end, limit)
            if value_end == -1:
                value_end = limit
            value = text[key_end + 1 : value_end]
            arguments[key] = value[1:] if value.startswith("\n") else value
            arguments[key] = arguments[key][:-1] if arguments[key].endswith("\n") else arguments[key]
            position = value_end
        calls.append(_Raw(name, arguments, typed=False))
        index = body_end + (len("</function>") if closing != -1 else 0)
        spans.append((opening, index))
    if not calls:
        return None
    return _Found(calls, _prose(text[:stop], spans) if start == 0 else "", format="qwen3_coder")


def _glm_call(body: str) -> _Raw:
    """GLM 4.5: `NAME\\n<arg_key>k</arg_key>\\n<arg_value>v</arg_value>...`."""
    first_key = body.find("<arg_key>")
    name = (body if first_key == -1 else body[:first_key]).strip()
    arguments: dict[str, Any] = {}
    index = 0
    while (key := _between(body, "<arg_key>", "</arg_key>", index)) is not None:
        key_text = body[key[0] : key[1]].strip()
        value = _between(body, "<arg_value>", "</arg_value>", key[2])
        if value is None:
            raise _Unreadable(f"<arg_key>{key_text}</arg_key> of {name} has no <arg_value>")
        arguments[key_text] = body[value[0] : value[1]]
        index = value[2]
    return _Raw(name, arguments, typed=False)


def _pythonic(text: str) -> _Found | None:
    """Bare pythonic lists `[get_weather(city='SF'), ...]` (Llama 3.2, Llama 4 templates)."""
    if "(" not in text:
        return None
    budget = _Budget(text)
    for tried, match in enumerate(_PY_LIST_START.finditer(text)):
        if tried >= _MAX_BARE_CANDIDATES or budget.left <= 0:
            break
        start = match.start()
        try:
            read = _python_call_list(text, start, budget)
        except _Unreadable:
            read = None
        if read is None:
            continue
        calls, end = read
        return _Found(calls, _prose(text, [(start, end)]), bare=True)
    return None


def _bare_json(text: str) -> _Found | None:
    """Llama 3 JSON `{"name": ..., "parameters": {...}}` (several, `;`-separated) and
    xLAM lists `[{"name": ..., "arguments": {...}}]`, in prose or a ```json fence."""
    calls: list[_Raw] = []
    spans: list[tuple[int, int]] = []
    index, tried = 0, 0
    while tried < _MAX_BARE_CANDIDATES and (key := text.find('"name"', index)) != -1:
        tried += 1
        index = key + 6
        start = text.rfind("{", max(0, key - 16), key)
        if start == -1 or text[start + 1 : key].strip():
            continue
        try:
            value, end = _DECODER.raw_decode(text, start)
        except (json.JSONDecodeError, RecursionError):
            continue
        if not isinstance(value, dict) or not isinstance(value.get("name"), str):
            continue
        if not ({"parameters", "arguments"} & value.keys()) or len(value) > 3:
            continue
        calls.append(_call_of(value))
        spans.append((start, end))
        index = end
    if not calls:
        return None
    spans = _widen_to_list(text, spans)
    return _Found(calls, _prose(text, spans), bare=True)


def _widen_to_list(text: str, spans: list[tuple[int, int]]) -> list[tuple[int, int]]:
    """The spans of calls, widened over the `[`, `,`, `;` and ```json fence around them."""
    widened = []
    for start, end in spans:
        while start > 0 and text[start - 1] in " \t\r\n[,;":
            start -= 1
        if text[max(0, start - 7) : start] == "```json":
            start -= 7
        while end < len(text) and text[end] in " \t\r\n],;":
            end += 1
        if text.startswith("```", end):
            end += 3
        widened.append((start, end))
    return widened


# The fixed order: formats with special tokens first (they cannot be mistaken for prose),
# then tag formats, then those without markup of their own.
_PARSERS: tuple[tuple[str, Callable[[str], _Found | None]], ...] = (
    ("harmony", _harmony),
    ("deepseek", _deepseek),
    ("kimi_k2", _kimi),
    ("command_r", _command_r),
    ("internlm2", _marker_then_json("<|action_start|><|plugin|>", "<|action_end|>")),
    ("granite", _marker_then_json("<|tool_call|>", None)),
    ("mistral", _mistral),
    ("llama3", _marker_then_json("<|python_tag|>", None)),
    ("llama4_pythonic", _llama4),
    ("phi4", _marker_then_json("functools[", None, keep=1)),
    ("hermes", _tool_call_tags),
    ("pythonic", _pythonic),
    ("llama3_json", _bare_json),
)

# Markers that are never part of an answer: a reply holding one is a tool call or a
# correction, never posted (SPEC 5.1).
_MARKERS: tuple[str, ...] = (
    "<tool_call>",
    "</tool_call>",
    "<function=",
    "[TOOL_CALLS]",
    "<|python_tag|>",
    "<|python_start|>",
    _DS_CALLS_BEGIN,
    _DS_CALL_BEGIN,
    "to=functions.",
    "<|call|>",
    "<|channel|>",
    "<arg_key>",
    "<|tool_calls_section_begin|>",
    "<|tool_call_begin|>",
    "<|tool_call|>",
    "<|action_start|>",
    "functools[",
    "<|START_ACTION|>",
)


# End-of-turn tokens a server without the model's template leaves in the text: dropped.
_END_TOKENS: tuple[str, ...] = (
    "<|eom_id|>",
    "<|eot_id|>",
    "<|im_end|>",
    "<|endoftext|>",
    "<|end_of_text|>",
    "<|return|>",
    "<｜end▁of▁sentence｜>",
    "<|END_OF_TURN_TOKEN|>",
)


def _without_end_tokens(text: str) -> str:
    if "<" not in text:
        return text
    for token in _END_TOKENS:
        if token in text:
            text = text.replace(token, "")
    return text


# Inline code on one line (`like this`): an answer may name markup there, as prose does.
_INLINE_CODE = re.compile(r"`[^`\n]*`")


def _first_marker(text: str) -> str | None:
    angle = "<" in text  # most markers open with one: one scan spares the rest
    for marker in _MARKERS:
        if (angle or marker[0] != "<") and marker in text:
            return marker
    return None


def tool_call_markup(text: str) -> str | None:
    """The first tool-call marker `text` holds outside inline code, or None: text holding
    one is never posted. (An answer about tool-call formats may quote `<tool_call>` in
    backticks; a tool call is never written so.)"""
    if _first_marker(text) is None:
        return None
    return _first_marker(_INLINE_CODE.sub("", text))


# --- names and arguments --------------------------------------------------------------


class _Names:
    """Offered tools by every name a model may use: real, encoded, bare when unique."""

    def __init__(self, tools: Iterable[str | ToolSpec]) -> None:
        self.schemas: dict[str, dict[str, Any]] = {}
        reals: list[str] = []
        for tool in tools:
            name = tool if isinstance(tool, str) else tool.name
            reals.append(name)
            if isinstance(tool, ToolSpec):
                self.schemas[name] = tool.input_schema or {}
        self.reals = list(dict.fromkeys(reals))
        try:
            self._codec: ToolNameCodec | None = ToolNameCodec(self.reals)
        except ValueError:
            self._codec = None
        bare: dict[str, list[str]] = {}
        for real in self.reals:
            bare.setdefault(real.rpartition("/")[2], []).append(real)
        self._bare = {short: names[0] for short, names in bare.items() if len(names) == 1}

    def resolve(self, written: str) -> str | None:
        name = written.strip()
        if name.startswith("functions."):
            name = name[len("functions.") :]
        if name in self.reals:
            return name
        if self._codec is not None and name in self._codec.wire_names:
            return self._codec.decode(name)
        return self._bare.get(name)

    def offered(self) -> str:
        return ", ".join(self.reals) or "none"


def _typed(value: str, schema: dict[str, Any]) -> Any:
    """A parameter written as text (XML formats), as the type its schema declares."""
    kind = schema.get("type")
    kinds = set(kind) if isinstance(kind, list) else {kind}
    if kinds & {"integer", "number", "boolean", "object", "array", "null"} and "string" not in kinds:
        try:
            return json.loads(value.strip())
        except (json.JSONDecodeError, RecursionError):
            return value
    return value


def _arguments(raw: _Raw, real: str, names: _Names) -> dict[str, Any]:
    arguments = raw.arguments
    if isinstance(arguments, str):
        try:
            arguments = json.loads(arguments, strict=False) if arguments.strip() else {}
        except json.JSONDecodeError as error:
            raise _Unreadable(f"the arguments of {real} are not a JSON object ({error.msg}): {arguments[:120]!r}") from None
        except RecursionError:
            raise _Unreadable(f"the arguments of {real} are not a JSON object (nested too deep)") from None
    if arguments is None:
        arguments = {}
    if not isinstance(arguments, dict):
        raise _Unreadable(f"the arguments of {real} must be a JSON object, not {json.dumps(arguments)[:80]}")
    if not raw.typed:
        properties = names.schemas.get(real, {}).get("properties", {})
        arguments = {
            key: _typed(value, properties.get(key, {})) if isinstance(value, str) else value
            for key, value in arguments.items()
        }
    return arguments


def _calls(found: _Found, names: _Names) -> tuple[TextToolCall, ...]:
    calls: list[TextToolCall] = []
    for raw in found.calls:
        if not isinstance(raw.name, str) or not raw.name.strip():
            raise _Unreadable(f"a tool call without a tool name: {json.dumps(raw.arguments, default=str)[:80]}")
        real = names.resolve(raw.name)
        if real is None:
            raise _Unreadable(f"unknown tool {raw.name.strip()[:80]!r} (offered: {names.offered()})")
        calls.append(TextToolCall(real, _arguments(raw, real, names)))
    return tuple(calls)


def find_text_tool_calls(text: str, tools: Iterable[str | ToolSpec]) -> TextToolCalls:
    """The tool calls `text` holds in a known open-model format, matched to `tools`.

    `tools` are the offered tools (real `server/tool` names, or `ToolSpec`s whose schemas
    type the values of XML formats). The answer is falsy when the text holds no tool-call
    markup; otherwise it names the format and holds either the calls or the problem.
    """
    names = _Names(tools)
    visible = _without_end_tokens(strip_think(text)).strip()
    for name, parser in _PARSERS:
        try:
            found = parser(visible)
        except _Unreadable as error:
            if tool_call_markup(visible) is None:  # markup only quoted in inline code: an answer
                return TextToolCalls(text=visible)
            return TextToolCalls(format=name, text="", problem=f"{error} ({_label(name)} tool-call format)")
        if found is None:
            continue
        if found.bare and not all(isinstance(raw.name, str) and names.resolve(raw.name) for raw in found.calls):
            continue  # an example object in an answer, not a call
        label = found.format or name
        try:
            calls = _calls(found, names)
        except _Unreadable as error:
            if tool_call_markup(visible) is None:
                return TextToolCalls(text=visible)
            return TextToolCalls(format=label, text="", problem=f"{error} ({_label(label)} tool-call format)")
        if not calls and not found.answer_only:
            if tool_call_markup(visible) is None:
                return TextToolCalls(text=visible)
            return TextToolCalls(format=label, problem=f"the {_label(label)} tool-call markup holds no call")
        return TextToolCalls(format=label, calls=calls, text=found.text)
    return TextToolCalls(text=visible)


_LABELS = {
    "harmony": "gpt-oss harmony",
    "deepseek": "DeepSeek",
    "kimi_k2": "Kimi K2",
    "command_r": "Command R",
    "internlm2": "InternLM2",
    "granite": "Granite",
    "mistral": "Mistral [TOOL_CALLS]",
    "llama3": "Llama 3 <|python_tag|>",
    "llama4_pythonic": "Llama 4 pythonic",
    "phi4": "Phi-4 functools",
    "hermes": "Hermes/Qwen <tool_call>",
    "qwen3_coder": "Qwen3-Coder XML",
    "glm45": "GLM 4.5",
    "pythonic": "pythonic",
    "llama3_json": "Llama 3 / xLAM JSON",
}


# Every `format` name an answer may carry (the README's table lists them all).
FORMATS: tuple[str, ...] = tuple(_LABELS)


def format_label(name: str) -> str:
    """A format's name for people ("Hermes/Qwen <tool_call>" for `hermes`)."""
    return _LABELS.get(name, name)


_label = format_label

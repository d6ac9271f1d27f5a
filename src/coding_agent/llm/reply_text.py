"""What a model's reply text holds beyond the protocol: reasoning blocks to drop
(`<think>`), and the one JSON object a JSON-text reply (or a planning or memory reply)
carries, found leniently (fenced or bare, trailing commas, several candidates).

Pure functions of text, shared by the reply protocols (`protocols.py`), planning's
replies, the memory keeper and the compressor. `repair_json_object` is the last resort of
the JSON-text protocol: the JSON small models write (single quotes, Python literals,
unquoted keys, comments, a missing closing brace), mended by a maintained library.
"""

from __future__ import annotations

import json
import re
from typing import Any

import json_repair

__all__ = ["strip_think", "strip_think_blocks", "JsonExtractionError", "extract_json_object", "repair_json_object"]


# --- <think> blocks -------------------------------------------------------------------

_THINK_TAG = re.compile(r"<(/?)(think|thinking)>", re.IGNORECASE)
_THINK_CLOSE = re.compile(r"</(?:think|thinking)>", re.IGNORECASE)
_THINK_OPEN = re.compile(r"<(?:think|thinking)>", re.IGNORECASE)


def _without_think_blocks(text: str) -> str:
    """`text` without whole `<think>...</think>` (or `<thinking>`) blocks: each opening tag
    up to the first closing tag of its name after it, as a lazy regex would match, but in
    one pass over the tags. (The regex `<(think|thinking)>.*?</\\1>` searched to the end of
    the text for every opening tag without a closing one: quadratic, minutes on a hostile
    reply of 200,000 characters.)"""
    tags = [(match.start(), match.end(), bool(match.group(1)), match.group(2).lower()) for match in _THINK_TAG.finditer(text)]
    if not tags:
        return text
    last_close: dict[str, int] = {}
    for index, (_, _, closing, name) in enumerate(tags):
        if closing:
            last_close[name] = index
    kept: list[str] = []
    position = 0
    inside: str | None = None
    for index, (start, end, closing, name) in enumerate(tags):
        if inside is None:
            if not closing and last_close.get(name, -1) > index:
                kept.append(text[position:start])
                inside = name
        elif closing and name == inside:
            position, inside = end, None
    kept.append(text[position:])
    return "".join(kept)


def strip_think(text: str) -> str:
    """`text` without reasoning blocks, which are never posted.

    Besides whole `<think>...</think>` blocks: a closing tag without an opening one (chat
    templates that put `<think>` in the prompt) drops everything before it, and an opening
    tag that is never closed (a reply cut off while thinking) drops everything after it.
    """
    text = _without_think_blocks(text)
    closing = None
    for closing in _THINK_CLOSE.finditer(text):  # noqa: B007 - the loop keeps the last match
        pass
    if closing is not None:
        text = text[closing.end() :]
    opening = _THINK_OPEN.search(text)
    if opening is not None:
        text = text[: opening.start()]
    return text.strip()


def strip_think_blocks(value: Any) -> Any:
    """Every string of a tool's arguments without whole `<think>...</think>` blocks.

    Arguments can end up posted (a file that is pushed, an MCP server that comments), and
    the JSON-text protocol already drops such blocks from the whole reply, so the native
    protocol does the same. Unclosed tags are left alone here: cutting everything after
    one would corrupt a file's content, not just drop reasoning.
    """
    if isinstance(value, str):
        return _without_think_blocks(value)
    if isinstance(value, dict):
        return {key: strip_think_blocks(item) for key, item in value.items()}
    if isinstance(value, list):
        return [strip_think_blocks(item) for item in value]
    return value


# --- JSON extraction ------------------------------------------------------------------


class JsonExtractionError(ValueError):
    """No usable JSON object in a reply; the message is meant for the model."""


_FENCE = re.compile(r"```[ \t]*([A-Za-z0-9_+-]*)[^\n`]*\n(.*?)```", re.DOTALL)
_PREFERRED_KEYS = frozenset({"command", "done"})


# A JSON string, its escapes respected; an unterminated one runs to the end of the text.
_JSON_STRING = re.compile(r'"(?:[^"\\]|\\.)*"?', re.S)
_TRAILING_COMMA = re.compile(r",(?=\s*[}\]])")


def _strings_masked(text: str) -> str:
    """`text` with every JSON string (quotes included) overwritten with quote marks: the
    same length, and only structure left to scan."""
    return _JSON_STRING.sub(lambda match: '"' * len(match.group()), text)


# One token of the brace scan: a JSON string (its escapes respected, the loop unrolled; an
# unterminated one runs to the end of the text) or a brace.
_SCAN_TOKEN = re.compile(r'"[^"\\]*(?:\\.[^"\\]*)*"?|[{}]', re.S)


class _Budget:
    """Characters the object search of one reply may still scan and load: four times the
    reply. Each candidate's scan is bounded by its own object, but a reply of `{` that
    never close (or close around invalid JSON) made every candidate read to the end:
    quadratic, minutes for a hostile reply of 200,000 characters."""

    def __init__(self, text: str) -> None:
        self.left = 4 * len(text) + 4096

    def spend(self, characters: int) -> bool:
        self.left -= characters
        return self.left > 0


def _object_end(text: str, start: int, budget: _Budget) -> int | None:
    """Index after the `}` closing the object that opens at `start`, strings respected;
    None when it never closes (or the budget runs out first)."""
    depth = 0
    for match in _SCAN_TOKEN.finditer(text, start):
        if match.end() - start > budget.left:
            budget.left = 0
            return None
        token = match.group()
        if token == "{":
            depth += 1
        elif token == "}":
            depth -= 1
            if depth == 0:
                budget.spend(match.end() - start)
                return match.end()
    budget.spend(len(text) - start)
    return None


def _without_trailing_commas(text: str) -> str:
    """`{"a": 1,}` -> `{"a": 1}`, leaving commas inside strings alone."""
    cut = [match.start() for match in _TRAILING_COMMA.finditer(_strings_masked(text))]
    if not cut:
        return text
    kept = [text[begin + 1 : end] for begin, end in zip([-1, *cut], [*cut, len(text)])]
    return "".join(kept)


def _load(candidate: str) -> Any:
    """The JSON value of `candidate`; nesting deeper than the interpreter's stack is
    invalid JSON here, not a crash of the run (hostile output, SPEC 15)."""
    try:
        try:
            return json.loads(candidate, strict=False)
        except json.JSONDecodeError:
            return json.loads(_without_trailing_commas(candidate), strict=False)
    except RecursionError:
        raise json.JSONDecodeError("nested too deep", candidate, 0) from None


def _find_object(text: str) -> dict[str, Any]:
    """The first JSON object in `text` with `command` or `done`, else the first object."""
    first: dict[str, Any] | None = None
    first_problem: str | None = None
    budget = _Budget(text)
    position = text.find("{")
    while position != -1 and budget.left > 0:
        end = _object_end(text, position, budget)
        if end is None:
            first_problem = first_problem or "the JSON object is not closed (was the reply cut off?)"
            position = text.find("{", position + 1)
            continue
        try:
            budget.spend(2 * (end - position))  # a load, and the retry without trailing commas
            value = _load(text[position:end])
        except json.JSONDecodeError as error:
            first_problem = first_problem or f"invalid JSON: {error.msg} at character {error.pos}"
            position = text.find("{", position + 1)
            continue
        if isinstance(value, dict):
            if _PREFERRED_KEYS & value.keys():
                return value
            first = first if first is not None else value
        position = text.find("{", end)
    if first is not None:
        return first
    raise JsonExtractionError(first_problem or "no JSON object found in the reply")


def _extract_from(text: str) -> dict[str, Any]:
    fences = [(language.lower(), body) for language, body in _FENCE.findall(text)]
    ordered = [body for language, body in fences if language == "json"] + [
        body for language, body in fences if language != "json"
    ]
    for body in ordered:
        try:
            return _find_object(body)
        except JsonExtractionError:
            continue
    return _find_object(text)


def extract_json_object(text: str) -> dict[str, Any]:
    """The reply's JSON object: from a ```json fence if any, else from the surrounding prose.

    `<think>` blocks are removed first. An unclosed `<thinking>` inside a JSON string (a
    comment cut off mid-thought) would cut the JSON too, so when that leaves no object,
    the text with only whole blocks removed is tried; the comment is stripped later.
    """
    stripped = strip_think(text)
    if not stripped:
        raise JsonExtractionError("the reply is empty (or only a <think> block)")
    try:
        return _extract_from(stripped)
    except JsonExtractionError as error:
        fallback = _without_think_blocks(text)
        if fallback == stripped:
            raise
        try:
            return _extract_from(fallback)
        except JsonExtractionError:
            raise error from None


# --- JSON repair ----------------------------------------------------------------------

# Repair is a pure-Python parse, about ten microseconds a character, and far slower on deep
# nesting (`{` repeated 2,000 times: half a second): a reply longer than this, or nesting
# deeper, is not a small model's slightly broken object, and is refused as it is.
_MAX_REPAIR_CHARS = 50_000
_MAX_REPAIR_DEPTH = 32


def _too_deep(text: str) -> bool:
    depth = 0
    for match in _SCAN_TOKEN.finditer(text):
        token = match.group()
        if token == "{":
            depth += 1
            if depth > _MAX_REPAIR_DEPTH:
                return True
        elif token == "}":
            depth -= 1
    return False


def _repaired(candidate: str) -> dict[str, Any] | None:
    """The object with `command` or `done` that json_repair reads in `candidate`, if any.

    `stream_stable` keeps strings as written: without it the library trims a string that
    ends in a newline, and a file's content would lose its last line break.
    """
    start = candidate.find("{")
    if start == -1 or len(candidate) - start > _MAX_REPAIR_CHARS or _too_deep(candidate[start:]):
        return None
    try:
        value = json_repair.repair_json(candidate[start:], return_objects=True, stream_stable=True)
    except (ValueError, TypeError, RecursionError):  # the library's own limits; the caller corrects
        return None
    for item in value if isinstance(value, list) else [value]:
        if isinstance(item, dict) and _PREFERRED_KEYS & item.keys():
            return item
    return None


def repair_json_object(text: str) -> dict[str, Any] | None:
    """The reply's `command`/`done` object, repaired; None when nothing can be made of it.

    Tried only after `extract_json_object` found no such object: a fenced block first,
    then the text from its first brace, `<think>` blocks removed.
    """
    stripped = strip_think(text)
    fences = [body for language, body in _FENCE.findall(stripped) if language.lower() in ("json", "")]
    for candidate in [*fences, stripped]:
        found = _repaired(candidate)
        if found is not None:
            return found
    return None

"""Reading a reply: tool calls written as text, in each family's format (SPEC 5.1).

Every reply without structured tool calls goes through `find_text_tool_calls` (and, under
JSON in text, through the JSON extraction and repair), so its cost is paid on every step
of a run on a local server. The parsers must stay linear: markers are found with
`str.find`, JSON read with `raw_decode`, no regular expression backtracks over the
reply. Figures: the native protocol's `parse` of a 10 kB reply in each format (reasoning,
prose and one `create` call whose content is code), of a 1 MB reply with no tool call
(prose, and source code full of brackets, braces and quotes), and the JSON-text
protocol's parse of a 10 kB reply with malformed JSON (the repair path), and both
protocols on hostile shapes of 200,000 characters (markers opened and never closed).

Run: `python benchmarks/bench_reply_parsing.py [--runs 200]`
"""

from __future__ import annotations

import argparse
import json
import time
from collections.abc import Callable
from typing import Any

from _common import emit, summary_ms

from coding_agent.llm.protocols import JsonTextProtocol, ToolCallsProtocol
from coding_agent.llm.types import LLMReply, ToolSpec
from coding_agent.retry import RetryPolicy
from coding_agent.llm.openai_client import OpenAICompatibleClient

TARGET_MS_PER_10KB = 1.0
NAMES = ["view", "create", "str_replace", "insert", "list_files", "search", "run", "git_status", "git_diff"]
TOOLS = [ToolSpec(f"workspace/{name}", name, {"type": "object", "properties": {"path": {"type": "string"}}}) for name in NAMES]
WIRE = "workspace__create"

_LINE = 'def handler_{n}(request: dict[str, "Any"]) -> list[int]:  # {{braces}} [brackets] (parens) \'quotes\'\n'


def _code(size: int) -> str:
    lines, total, n = [], 0, 0
    while total < size:
        line = _LINE.format(n=n)
        lines.append(line)
        total += len(line)
        n += 1
    return "".join(lines)[:size]


def _reply(family: str, content: str) -> str:
    """A reply in `family`'s format: reasoning, prose, one call creating a file."""
    args = {"path": "src/handlers.py", "content": content}
    j = json.dumps(args)
    think = "<think>" + "The user wants the handlers written; I will create the file. " * 8 + "</think>\n"
    calls: dict[str, Callable[[], str]] = {
        "hermes": lambda: f'<tool_call>\n{{"name": "{WIRE}", "arguments": {j}}}\n</tool_call>',
        "qwen3_coder": lambda: f"<tool_call>\n<function={WIRE}>\n<parameter=path>\nsrc/handlers.py\n</parameter>\n<parameter=content>\n{content}\n</parameter>\n</function>\n</tool_call>",
        "mistral": lambda: f"[TOOL_CALLS]{WIRE}[ARGS]{j}",
        "llama3_json": lambda: f'{{"name": "{WIRE}", "parameters": {j}}}',
        "llama3": lambda: f'<|python_tag|>{{"name": "{WIRE}", "parameters": {j}}}<|eom_id|>',
        "llama4_pythonic": lambda: f"<|python_start|>[{WIRE}(path='src/handlers.py', content={content!r})]<|python_end|>",
        "pythonic": lambda: f"[{WIRE}(path='src/handlers.py', content={content!r})]",
        "deepseek": lambda: f"<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>{WIRE}\n```json\n{j}\n```<｜tool▁call▁end｜><｜tool▁calls▁end｜>",
        "deepseek_v31": lambda: f"<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>{WIRE}<｜tool▁sep｜>{j}<｜tool▁call▁end｜><｜tool▁calls▁end｜>",
        "harmony": lambda: f"<|channel|>analysis<|message|>Need to create it.<|end|><|start|>assistant<|channel|>commentary to=functions.{WIRE} <|constrain|>json<|message|>{j}<|call|>",
        "glm45": lambda: f"<tool_call>{WIRE}\n<arg_key>path</arg_key>\n<arg_value>src/handlers.py</arg_value>\n<arg_key>content</arg_key>\n<arg_value>{content}</arg_value>\n</tool_call>",
        "kimi_k2": lambda: f"<|tool_calls_section_begin|><|tool_call_begin|>functions.{WIRE}:0<|tool_call_argument_begin|>{j}<|tool_call_end|><|tool_calls_section_end|>",
        "granite": lambda: f'<|tool_call|> [{{"name": "{WIRE}", "arguments": {j}}}]',
        "internlm2": lambda: f'<|action_start|><|plugin|>{{"name": "{WIRE}", "parameters": {j}}}<|action_end|>',
        "phi4": lambda: f'functools[{{"name": "{WIRE}", "arguments": {j}}}]',
        "xlam": lambda: f'[{{"name": "{WIRE}", "arguments": {j}}}]',
        "command_r": lambda: f'<|START_ACTION|>[{{"tool_call_id": "0", "tool_name": "{WIRE}", "parameters": {j}}}]<|END_ACTION|>',
    }
    return think + "I will write the handlers now.\n" + calls[family]()


def _time(parse: Callable[[], Any], runs: int) -> list[float]:
    parse()  # warm: imports, caches
    durations = []
    for _ in range(runs):
        started = time.perf_counter()
        parse()
        durations.append(time.perf_counter() - started)
    return durations


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--runs", type=int, default=200)
    options = parser.parse_args()
    llm = OpenAICompatibleClient(model="m", base_url="http://127.0.0.1:9/v1", api_key="k", retry=RetryPolicy())
    native = ToolCallsProtocol()
    native.prepare(llm, TOOLS)
    json_text = JsonTextProtocol()
    json_text.prepare(llm, TOOLS)

    families: dict[str, Any] = {}
    for family in ("hermes", "qwen3_coder", "mistral", "llama3_json", "llama3", "llama4_pythonic", "pythonic", "deepseek",
                   "deepseek_v31", "harmony", "glm45", "kimi_k2", "granite", "internlm2", "phi4", "xlam", "command_r"):
        probe = _reply(family, "")
        text = _reply(family, _code(10_000 - len(probe)))
        reply = LLMReply(content=text)
        decision = native.parse(reply)
        assert decision.error is None and decision.actions and decision.actions[0].tool == "workspace/create", (family, decision.error)
        families[family] = {"chars": len(text), **summary_ms(_time(lambda: native.parse(reply), options.runs))}

    prose = ("The change keeps the old behaviour for callers that pass a list, and documents why. " * 13_000)[:1_000_000]
    code = _code(1_000_000)
    no_call: dict[str, Any] = {}
    for name, text in (("prose", prose), ("code", code)):
        reply = LLMReply(content=text)
        assert native.parse(reply).done
        no_call[name] = {"chars": len(text), **summary_ms(_time(lambda: native.parse(reply), max(5, options.runs // 20)))}

    # Hostile shapes at the size a reply may have (200,000 characters, llm/hygiene.py): each
    # made a search per opening marker read to the end (quadratic) before it was bounded.
    hostile_texts = {
        "think_never_closed": "<think>" * 28_000,
        "pythonic_never_closed": "[f(" * 66_000,
        "name_keys_never_closed": '{"name": "a", "parameters": ' * 7_000,
        "braces_never_closed": "{" * 199_000,
        "nested_around_invalid_json": '{"a":' * 39_000 + "x" + "}" * 39_000,
    }
    hostile: dict[str, Any] = {}
    for name, text in hostile_texts.items():
        hostile_reply = LLMReply(content=text)
        hostile[name] = {
            "chars": len(text),
            "native": summary_ms(_time(lambda: native.parse(hostile_reply), 3)),
            "json_text": summary_ms(_time(lambda: json_text.parse(hostile_reply), 3)),
        }

    broken = "{'comment': 'Writing it', command: {tool: 'workspace/create', args: {path: 'a.py', content: " + json.dumps(_code(9_800)) + "}}"
    repaired_reply = LLMReply(content=broken)
    assert json_text.parse(repaired_reply).actions, "the malformed reply is repaired"
    repair = {"chars": len(broken), **summary_ms(_time(lambda: json_text.parse(repaired_reply), max(5, options.runs // 10)))}

    worst = max(figures["median_ms"] for figures in families.values())
    emit(
        {
            "benchmark": "reply_parsing",
            "native_parse_10kb_by_format": families,
            "native_parse_1mb_without_tool_call": no_call,
            "json_text_repair_10kb": repair,
            "hostile_200k": hostile,
            "worst_format_median_ms": worst,
            "target": f"each format's median < {TARGET_MS_PER_10KB} ms per 10 kB reply",
            "met": worst < TARGET_MS_PER_10KB,
        }
    )


if __name__ == "__main__":
    main()

"""Tool calls written as text (SPEC 5.1): one verbatim completion per family.

Every completion below is copied as it stands from a model server's own parser tests
(the source is named beside it), with the tools those tests offer. The parser must read
the calls, in order, drop the reasoning and markup from the prose, and say which format
it found; markup it cannot read is a problem naming it, never an answer.
"""

from __future__ import annotations

import pytest

from pathlib import Path

from coding_agent.llm.text_tool_calls import FORMATS, TextToolCall, find_text_tool_calls, tool_call_markup
from coding_agent.llm.types import ToolSpec

WEATHER = {"city": "Dallas", "state": "TX", "unit": "fahrenheit"}

# (family, completion, offered tools, expected calls, expected prose, source)
FAMILIES: list[tuple[str, str, list[str], list[tuple[str, dict[str, object]]], str, str]] = [
    (
        "hermes",
        # Qwen QwQ-32B thinking, then one call; trailing "\n\n " as served
        "首先，我需要调用互联网搜索工具。\n</think>\n\n<tool_call>"
        '\n{"name": "internet_search", "arguments": {"question": "5MW燃气轮机设计参数 空气流量 压气机压比 转速"}}'
        "\n</tool_call>\n\n ",
        ["internet_search"],
        [("internet_search", {"question": "5MW燃气轮机设计参数 空气流量 压气机压比 转速"})],
        "",
        "vllm tests/entrypoints/openai/tool_parsers/test_hermes_tool_parser.py (NO_STREAM_FUNCTION_OUTPUT, shortened)",
    ),
    (
        "qwen3_coder",
        "Sure! Let me check the weather for you.<tool_call>\n<function=get_current_weather>\n<parameter=city>\nDallas\n"
        "</parameter>\n<parameter=state>\nTX\n</parameter>\n<parameter=unit>\nfahrenheit\n</parameter>\n</function>\n"
        "</tool_call>",
        ["get_current_weather"],
        [("get_current_weather", WEATHER)],
        "Sure! Let me check the weather for you.",
        "vllm tests/tool_use/test_qwen3coder_tool_parser.py (single_tool_with_content)",
    ),
    (
        "mistral",
        "I'll check the weather for you."
        '[TOOL_CALLS][{"name": "get_current_weather", "arguments": {"city": "Dallas", "state": "TX", "unit": "fahrenheit"}}]',
        ["get_current_weather"],
        [("get_current_weather", WEATHER)],
        "I'll check the weather for you.",
        "vllm tests/tool_use/test_xlam_tool_parser.py (single_tool_with_tool_calls_tag: the pre-v11 Mistral list)",
    ),
    (
        "mistral",
        '[TOOL_CALLS]add_this_and_that{"a": 3.5, "b": 4}',
        ["add_this_and_that"],
        [("add_this_and_that", {"a": 3.5, "b": 4})],
        "",
        "vllm tests/tool_use/test_mistral_tool_parser.py (single_tool_add, v11)",
    ),
    (
        "mistral",
        '[TOOL_CALLS]add_this_and_that[ARGS]{"a": 3.5, "b": 4}',
        ["add_this_and_that"],
        [("add_this_and_that", {"a": 3.5, "b": 4})],
        "",
        "vllm tests/tool_use/test_mistral_tool_parser.py (single_tool_add_args, v13)",
    ),
    (
        "llama3_json",
        'Here is the result: {"name": "getOpenIncidentsTool", "parameters": {}} Would you like to know more?',
        ["getOpenIncidentsTool"],
        [("getOpenIncidentsTool", {})],
        "Here is the result:\nWould you like to know more?",
        "vllm tests/entrypoints/openai/tool_parsers/test_llama3_json_tool_parser.py (simple)",
    ),
    (
        "llama3_json",
        '{"name": "searchTool", "parameters": {"query": "test1"}}; {"name": "getOpenIncidentsTool", "parameters": {}}; '
        '{"name": "searchTool", "parameters": {"query": "test2"}}',
        ["searchTool", "getOpenIncidentsTool"],
        [("searchTool", {"query": "test1"}), ("getOpenIncidentsTool", {}), ("searchTool", {"query": "test2"})],
        "",
        "vllm tests/entrypoints/openai/tool_parsers/test_llama3_json_tool_parser.py (multiple_json)",
    ),
    (
        "llama3",
        '<|python_tag|>{"name": "get_weather", "arguments": {"city": "Beijing"}}',
        ["get_weather"],
        [("get_weather", {"city": "Beijing"})],
        "",
        "sglang test/srt/test_function_call_parser.py (Llama32Detector, python_tag)",
    ),
    (
        "llama4_pythonic",
        "<|python_start|>[get_weather(city='LA', metric='C')]<|python_end|>",
        ["get_weather"],
        [("get_weather", {"city": "LA", "metric": "C"})],
        "",
        "vllm tests/entrypoints/openai/tool_parsers/test_llama4_pythonic_tool_parser.py (PYTHON_TAG_FUNCTION_OUTPUT)",
    ),
    (
        "pythonic",
        "[get_weather(city='San Francisco', metric='celsius'), register_user(name='John Doe', age=37)]",
        ["get_weather", "register_user"],
        [("get_weather", {"city": "San Francisco", "metric": "celsius"}), ("register_user", {"name": "John Doe", "age": 37})],
        "",
        "vllm tests/entrypoints/openai/tool_parsers/test_pythonic_tool_parser.py (parallel calls)",
    ),
    (
        "llama4_pythonic",
        "User wants to get the weather in Mars. <|python_start|>[get_weather(location='Mars', unit='celsius')]<|python_end|> "
        "In this way we will get the weather in Mars.",
        ["get_weather"],
        [("get_weather", {"location": "Mars", "unit": "celsius"})],
        "User wants to get the weather in Mars.\nIn this way we will get the weather in Mars.",
        "sglang test/srt/test_function_call_parser.py (test_detect_and_parse_with_python_start_and_end_token)",
    ),
    (
        "deepseek",
        "Let me check the weather for you.<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>get_weather\n"
        '```json\n{"city": "Paris"}\n```<｜tool▁call▁end｜><｜tool▁calls▁end｜>',
        ["get_weather"],
        [("get_weather", {"city": "Paris"})],
        "Let me check the weather for you.",
        "vllm tests/entrypoints/openai/tool_parsers/test_deepseekv3_tool_parser.py (surrounding_text_output)",
    ),
    (
        "deepseek",
        "some prefix text<｜tool▁calls▁begin｜>"
        '<｜tool▁call▁begin｜>foo<｜tool▁sep｜>{"x":1}<｜tool▁call▁end｜>'
        '<｜tool▁call▁begin｜>bar<｜tool▁sep｜>{"y":2}<｜tool▁call▁end｜>'
        "<｜tool▁calls▁end｜> some suffix text",
        ["foo", "bar"],
        [("foo", {"x": 1}), ("bar", {"y": 2})],
        "some prefix text\nsome suffix text",
        "vllm tests/tool_use/test_deepseekv31_tool_parser.py (multiple_tools, V3.1)",
    ),
    (
        "harmony",
        "<|channel|>analysis<|message|>Need to use function get_current_weather.<|end|><|start|>assistant"
        '<|channel|>commentary to=functions.get_current_weather <|constrain|>json<|message|>{"location":"San Francisco"}<|call|>',
        ["get_current_weather"],
        [("get_current_weather", {"location": "San Francisco"})],
        "",
        "OpenAI harmony response format guide (openai/harmony docs; vllm test_openai_tool_parser.py)",
    ),
    (
        "glm45",
        "I'll help you check the weather. <tool_call>get_current_weather\n    <arg_key>city</arg_key>\n"
        "    <arg_value>Seattle</arg_value>\n    <arg_key>state</arg_key>\n    <arg_value>WA</arg_value>\n"
        "    <arg_key>unit</arg_key>\n    <arg_value>celsius</arg_value>\n    </tool_call>",
        ["get_current_weather"],
        [("get_current_weather", {"city": "Seattle", "state": "WA", "unit": "celsius"})],
        "I'll help you check the weather.",
        "vllm tests/tool_use/test_glm4_moe_tool_parser.py (tool_call_with_content_before)",
    ),
    (
        "kimi_k2",
        "I'll help you check the weather. <|tool_calls_section_begin|> <|tool_call_begin|>\n"
        'functions.get_weather:0 <|tool_call_argument_begin|> {"city": "Beijing"} <|tool_call_end|> <|tool_call_begin|>\n'
        'functions.get_weather:1 <|tool_call_argument_begin|> {"city": "Shanghai"} <|tool_call_end|> <|tool_calls_section_end|>',
        ["get_weather"],
        [("get_weather", {"city": "Beijing"}), ("get_weather", {"city": "Shanghai"})],
        "I'll help you check the weather.",
        "vllm tests/tool_use/test_kimi_k2_tool_parser.py (multi_tool_call_with_content_before)",
    ),
    (
        "granite",
        '<|tool_call|> [\n  {"name": "get_weather", "arguments": {"city": "Tokyo"}},\n'
        '  {"name": "get_time", "arguments": {"timezone": "Asia/Tokyo"}}\n]',
        ["get_weather", "get_time"],
        [("get_weather", {"city": "Tokyo"}), ("get_time", {"timezone": "Asia/Tokyo"})],
        "",
        "vllm tests/entrypoints/openai/tool_parsers/test_granite_tool_parser.py (parallel_tool_calls_output)",
    ),
    (
        "internlm2",
        'Let me check the weather for you. <|action_start|><|plugin|>{"name": "get_weather", '
        '"parameters": {"city": "Tokyo"}}<|action_end|>',
        ["get_weather"],
        [("get_weather", {"city": "Tokyo"})],
        "Let me check the weather for you.",
        "vllm tests/entrypoints/openai/tool_parsers/test_internlm2_tool_parser.py (surrounding_text_output)",
    ),
    (
        "phi4",
        'Let me check the weather for you.\nfunctools[{"name": "get_weather", "arguments": {"city": "Tokyo"}}]\n'
        "Would you like to know more?",
        ["get_weather"],
        [("get_weather", {"city": "Tokyo"})],
        "Let me check the weather for you.\nWould you like to know more?",
        "vllm tests/entrypoints/openai/tool_parsers/test_phi4mini_tool_parser.py (surrounding_text_output)",
    ),
    (
        "llama3_json",  # xLAM: a bare JSON list after reasoning
        "<think>I'll help you with that.</think>"
        '[{"name": "get_current_weather", "arguments": {"city": "Dallas", "state": "TX", "unit": "fahrenheit"}}]',
        ["get_current_weather"],
        [("get_current_weather", WEATHER)],
        "",
        "vllm tests/tool_use/test_xlam_tool_parser.py (single_tool_with_think_tag)",
    ),
    (
        "command_r",
        "<|START_THINKING|>first I think about foo<|END_THINKING|><|START_ACTION|>\n[\n"
        '    {"tool_call_id": "0", "tool_name": "foo", "parameters": {"query": "query1"}},\n'
        '    {"tool_call_id": "1", "tool_name": "bar", "parameters": {"x": 42}}\n]\n<|END_ACTION|>',
        ["foo", "bar"],
        [("foo", {"query": "query1"}), ("bar", {"x": 42})],
        "",
        "vllm tests/tool_parsers/test_cohere_command_tool_parser.py (cmd3-multiple_tool_calls)",
    ),
]


@pytest.mark.parametrize(
    ("family", "completion", "tools", "expected", "prose", "source"),
    FAMILIES,
    ids=[f"{family}-{index}" for index, (family, *_rest) in enumerate(FAMILIES)],
)
def test_each_family_is_read_from_its_verbatim_completion(
    family: str, completion: str, tools: list[str], expected: list[tuple[str, dict[str, object]]], prose: str, source: str
) -> None:
    found = find_text_tool_calls(completion, tools)
    assert found.problem is None, (found.problem, source)
    assert found.calls == tuple(TextToolCall(name, args) for name, args in expected), source
    assert found.format == family
    assert found.text == prose
    assert tool_call_markup(found.text) is None


def test_names_match_encoded_real_or_bare_when_unique() -> None:
    tools = ["workspace/create", "workspace/view", "other/view", "done"]
    for written in ("workspace__create", "workspace/create", "create", "functions.workspace__create"):
        found = find_text_tool_calls(f'<tool_call>{{"name": "{written}", "arguments": {{"path": "a"}}}}</tool_call>', tools)
        assert found.calls == (TextToolCall("workspace/create", {"path": "a"}),), written
    ambiguous = find_text_tool_calls('<tool_call>{"name": "view", "arguments": {}}</tool_call>', tools)
    assert ambiguous.calls == () and ambiguous.problem is not None and "unknown tool 'view'" in ambiguous.problem


def test_unknown_tool_and_broken_arguments_are_problems_naming_them() -> None:
    unknown = find_text_tool_calls('<tool_call>{"name": "rm_rf", "arguments": {}}</tool_call>', ["workspace/create"])
    assert unknown.problem is not None and "rm_rf" in unknown.problem and "workspace/create" in unknown.problem
    broken = find_text_tool_calls('<tool_call>{"name": "workspace__create", "arguments": {path: a</tool_call>', ["workspace/create"])
    assert broken.problem is not None and "not JSON" in broken.problem and broken.format == "hermes"
    listed = find_text_tool_calls('[TOOL_CALLS]workspace__create[ARGS]"a string"', ["workspace/create"])
    assert listed.problem is not None and "JSON object" in listed.problem


def test_a_call_inside_think_is_not_read() -> None:
    text = '<think><tool_call>{"name": "workspace__run", "arguments": {"command": "rm -rf /"}}</tool_call></think>All done.'
    found = find_text_tool_calls(text, ["workspace/run"])
    assert not found and found.calls == () and found.text == "All done."


def test_bare_json_and_pythonic_count_only_with_offered_names() -> None:
    answer = 'An example object: {"name": "Ada", "parameters": {"age": 36}} and [print(x=1)].'
    found = find_text_tool_calls(answer, ["workspace/create"])
    assert not found and found.problem is None and found.text == answer


def test_xml_values_follow_the_schema() -> None:
    spec = ToolSpec("workspace/insert", "", {"type": "object", "properties": {"insert_line": {"type": "integer"}, "text": {"type": "string"}}})
    text = "<tool_call>\n<function=workspace__insert>\n<parameter=insert_line>\n3\n</parameter>\n<parameter=text>\n42\n</parameter>\n</function>\n</tool_call>"
    assert find_text_tool_calls(text, [spec]).calls == (TextToolCall("workspace/insert", {"insert_line": 3, "text": "42"}),)


def test_harmony_final_channel_is_an_answer_and_analysis_is_dropped() -> None:
    text = "<|channel|>analysis<|message|>secret plan<|end|><|start|>assistant<|channel|>final<|message|>Done: see the PR.<|return|>"
    found = find_text_tool_calls(text, ["workspace/create"])
    assert found.format == "harmony" and found.calls == () and found.problem is None
    assert found.text == "Done: see the PR."


def test_plain_text_has_no_format() -> None:
    found = find_text_tool_calls("I fixed it; `functools.partial` helps [see docs](x).", ["workspace/create"])
    assert not found and found.problem is None


def test_the_readme_table_names_every_format() -> None:
    readme = (Path(__file__).resolve().parents[2] / "README.md").read_text(encoding="utf-8")
    table = readme.split("### Tool calls the agent reads from text", 1)[1].split("\n## ", 1)[0]
    for name in FORMATS:
        assert f"| `{name}` |" in table, name


def test_markup_quoted_in_inline_code_is_an_answer() -> None:
    answer = "Added support for the `<tool_call>` tag and for `[TOOL_CALLS]name{...}` replies."
    found = find_text_tool_calls(answer, ["workspace/create"])
    assert found.problem is None and found.calls == () and found.text == answer
    assert tool_call_markup(answer) is None
    assert tool_call_markup("Added it. <tool_call>") == "<tool_call>"


# --- linear on hostile shapes ---------------------------------------------------------

import re  # noqa: E402

from hypothesis import given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

from coding_agent.llm.protocols import JsonTextProtocol, ToolCallsProtocol  # noqa: E402
from coding_agent.llm.reply_text import _without_think_blocks, strip_think  # noqa: E402
from coding_agent.llm.openai_client import OpenAICompatibleClient  # noqa: E402
from coding_agent.llm.types import LLMReply  # noqa: E402
from coding_agent.retry import RetryPolicy  # noqa: E402

_LAZY_THINK = re.compile(r"<(think|thinking)>.*?</\1>", re.IGNORECASE | re.DOTALL)  # what it replaced


@settings(max_examples=300, deadline=None)
@given(st.lists(st.sampled_from(["<think>", "</think>", "<thinking>", "</thinking>", "<THINK>", "</Thinking>", "a", "\n", "<"]), max_size=30))
def test_think_blocks_go_as_the_lazy_regex_took_them(parts: list[str]) -> None:
    text = "".join(parts)
    assert _without_think_blocks(text) == _LAZY_THINK.sub("", text)


HOSTILE = {
    "think_never_closed": "<think>" * 25_000,
    "pythonic_never_closed": "[f(" * 60_000,
    "qwen_parameters_never_closed": "<tool_call><function=workspace__create>" + "<parameter=a>x" * 12_000,
    "name_keys_never_closed": '{"name": "a", "parameters": ' * 7_000,
    "tool_call_tags": "<tool_call>" * 18_000,
    "quoted_markup": "`<tool_call>` " * 14_000,
    "braces_never_closed": "{" * 199_000,
    "nested_around_invalid_json": '{"a":' * 39_000 + "x" + "}" * 39_000,
    "braces_within_repair_size": "{" * 40_000,
}


@pytest.mark.parametrize("case", sorted(HOSTILE))
def test_hostile_shapes_of_200k_end_with_an_answer_or_a_problem(case: str) -> None:
    """Each took seconds to minutes with a search per opening marker; linear now (the
    figures are in benchmarks/bench_reply_parsing.py)."""
    text = HOSTILE[case]
    found = find_text_tool_calls(text, ["workspace/create"])
    assert len(found.calls) <= 1  # the unclosed Qwen3-Coder call is read leniently, as vLLM does
    assert strip_think(text) is not None
    tools = [ToolSpec("workspace/create", "", {})]
    for protocol in (ToolCallsProtocol(), JsonTextProtocol()):
        protocol.prepare(OpenAICompatibleClient(model="m", base_url="http://127.0.0.1:9/v1", api_key="k", retry=RetryPolicy()), tools)
        decision = protocol.parse(LLMReply(content=text))
        assert decision.error is not None or decision.actions or decision.done

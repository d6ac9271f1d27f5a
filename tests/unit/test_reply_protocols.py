"""The two reply protocols: JSON extraction, decisions, corrections, tool results."""

from __future__ import annotations

import json

import pytest

from coding_agent.llm.openai_client import OpenAICompatibleClient
from coding_agent.llm.protocols import (
    DONE_TOOL,
    ParsedReply,
    JsonExtractionError,
    JsonTextProtocol,
    ToolAction,
    ToolCallsProtocol,
    create_protocol,
    extract_json_object,
    strip_think,
)
from coding_agent.llm.tool_names import RAW_ARGUMENTS_KEY
from coding_agent.llm.types import LLMReply, ToolCallRequest, ToolSpec
from coding_agent.retry import RetryPolicy

COMMAND = '{"comment": "Creating", "command": {"tool": "workspace/create", "args": {"path": "a.txt"}}}'


def _client() -> OpenAICompatibleClient:
    """A real client that never sends a request here: only its history is used."""
    return OpenAICompatibleClient(model="m", base_url="http://127.0.0.1:9/v1", api_key="k", retry=RetryPolicy())


def _json(text: str) -> ParsedReply:
    return JsonTextProtocol().parse(LLMReply(content=text))


# --- <think> and extraction -----------------------------------------------------------


def test_think_blocks_are_removed_closed_unopened_and_unclosed() -> None:
    assert strip_think("<think>plan {\"done\": true}</think>Answer") == "Answer"
    assert strip_think("reasoning without opening</think>\nAnswer") == "Answer"
    assert strip_think("Answer\n<think>cut off while thinking") == "Answer"
    assert strip_think("<THINK>a</THINK>x<think>b</think>y") == "xy"


def test_plain_json_reply() -> None:
    decision = _json(COMMAND)
    assert decision == ParsedReply(
        comment="Creating", actions=(ToolAction("workspace/create", {"path": "a.txt"}, None),), done=False
    )


def test_fenced_json_block_is_preferred_over_prose_objects() -> None:
    text = 'I will use {"example": 1} first.\n```json\n' + COMMAND + "\n```\nThanks"
    assert _json(text).actions[0].tool == "workspace/create"


def test_json_inside_prose_is_found() -> None:
    decision = _json("Sure! Here is my next step: " + COMMAND + " Let me know.")
    assert decision.actions[0].args == {"path": "a.txt"}
    assert decision.comment == "Creating"


def test_think_block_is_removed_before_extraction_and_never_in_the_comment() -> None:
    text = '<think>maybe {"done": true, "comment": "not this"}</think>\n' + COMMAND
    decision = _json(text)
    assert decision.done is False
    assert decision.comment == "Creating"


def test_command_comment_is_accepted_as_the_comment() -> None:
    decision = _json('{"command": {"comment": "Reading it", "tool": "workspace/read", "args": {"path": "x"}}}')
    assert decision.comment == "Reading it"
    assert decision.actions == (ToolAction("workspace/read", {"path": "x"}, None),)


def test_done_reply() -> None:
    decision = _json('```\n{"done": true, "comment": "All finished"}\n```')
    assert decision == ParsedReply(comment="All finished", actions=(), done=True)


def test_braces_and_quotes_inside_strings_do_not_confuse_the_scanner() -> None:
    content = 'def f():\n    return {"a": "}"}  # \\" tricky {'
    text = "Writing: " + json.dumps({"comment": "code {x}", "command": {"tool": "w/create", "args": {"content": content}}})
    decision = _json(text)
    assert decision.actions[0].args["content"] == content
    assert decision.comment == "code {x}"


def test_trailing_commas_and_raw_newlines_are_tolerated() -> None:
    decision = _json('{"comment": "a,\n b", "command": {"tool": "w/t", "args": {"x": [1, 2,],},},}')
    assert decision.actions[0].args == {"x": [1, 2]}
    assert decision.comment == "a,\n b"


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        ("no json here", "no JSON object"),
        ("", "empty"),
        ("<think>only thinking", "empty"),
        ('{"comment": "x", "tool": "w/t"', "not closed"),
        ("{'single': 'quotes'}", "invalid JSON"),
        ('{"comment": "just talking"}', "neither"),
        ('{"command": {"args": {}}}', "command.tool"),
        ('{"command": {"tool": "w/t", "args": [1]}}', "command.args"),
    ],
)
def test_unusable_replies_give_an_error_and_nothing_to_do(text: str, problem: str) -> None:
    decision = _json(text)
    assert decision.error is not None and problem in decision.error
    assert decision.actions == () and decision.done is False


def test_extract_raises_for_no_object() -> None:
    with pytest.raises(JsonExtractionError):
        extract_json_object("nothing")


def test_json_correction_repeats_the_format() -> None:
    message = JsonTextProtocol().correction_message("no JSON object found in the reply")
    assert "no JSON object found" in message and '"done": true' in message


def test_json_tool_result_is_previous_output_with_command_args_and_output() -> None:
    llm = _client()
    action = ToolAction("workspace/create", {"path": "a.txt"}, None)
    JsonTextProtocol().send_tool_result(llm, action, "created a.txt", is_error=False)
    message = llm.messages[-1]
    assert message["role"] == "user"
    payload = extract_json_object(message["content"])
    assert payload == {
        "previous_output": {"tool": "workspace/create", "args": {"path": "a.txt"}, "is_error": False, "output": "created a.txt"}
    }


def test_json_prepare_offers_no_native_tools() -> None:
    llm = _client()
    llm.set_tools([DONE_TOOL])
    JsonTextProtocol().prepare(llm, [ToolSpec("w/t", "d", {})])
    assert llm.tools == []


# --- native tool calls ----------------------------------------------------------------


def _calls(*calls: tuple[str, dict[str, object]], content: str = "") -> ParsedReply:
    reply = LLMReply(
        content=content,
        tool_calls=tuple(ToolCallRequest(id=f"c{i}", name=name, arguments=args) for i, (name, args) in enumerate(calls)),
    )
    return ToolCallsProtocol().parse(reply)


def test_tool_calls_become_actions_in_order_with_the_text_as_comment() -> None:
    decision = _calls(("w/read", {"path": "a"}), ("w/read", {"path": "b"}), content="<think>hm</think>Reading both")
    assert decision == ParsedReply(
        comment="Reading both",
        actions=(ToolAction("w/read", {"path": "a"}, "c0"), ToolAction("w/read", {"path": "b"}, "c1")),
        done=False,
    )


def test_done_tool_finishes_with_its_comment() -> None:
    decision = _calls(("done", {"comment": "Wrote hello.txt"}), content="Finishing")
    assert decision == ParsedReply(comment="Wrote hello.txt", actions=(), done=True)


def test_reply_without_tool_calls_is_done_with_its_text() -> None:
    decision = _calls(content="<think>x</think>All done, see the PR.")
    assert decision == ParsedReply(comment="All done, see the PR.", actions=(), done=True)


def test_empty_reply_is_an_error() -> None:
    decision = _calls(content="<think>only thoughts</think>")
    assert decision.error is not None and decision.done is False


def test_unparseable_arguments_are_reported_and_nothing_runs() -> None:
    decision = _calls(("w/create", {RAW_ARGUMENTS_KEY: "{path: a"}), ("w/read", {"path": "b"}))
    assert decision.actions == () and decision.done is False
    assert decision.error is not None and "w/create" in decision.error and "{path: a" in decision.error


def test_tool_calls_prepare_adds_done_once() -> None:
    llm = _client()
    tools = [ToolSpec("w/read", "Read", {"type": "object"})]
    protocol = ToolCallsProtocol()
    protocol.prepare(llm, tools)
    protocol.prepare(llm, [*tools, DONE_TOOL])
    assert [tool.name for tool in llm.tools] == ["w/read", "done"]


def test_tool_result_answers_the_call_by_id() -> None:
    llm = _client()
    ToolCallsProtocol().send_tool_result(llm, ToolAction("w/read", {}, "c7"), "boom", is_error=True)
    assert llm.messages[-1] == {"role": "tool", "tool_call_id": "c7", "name": "w/read", "content": "[error] boom"}


def test_create_protocol_follows_function_calling() -> None:
    assert create_protocol(True).name == "tool_calls" and create_protocol(True).uses_native_tools
    assert create_protocol(False).name == "json_text" and not create_protocol(False).uses_native_tools


# --- replies as real models give them (SPEC 5.1) ---------------------------------------

TOOLS = [ToolSpec("workspace/create", "Create a file", {"type": "object"}), ToolSpec("workspace/view", "View", {})]


def _prepared(protocol: JsonTextProtocol | ToolCallsProtocol) -> JsonTextProtocol | ToolCallsProtocol:
    protocol.prepare(_client(), TOOLS)
    return protocol


@pytest.mark.parametrize(
    "text",
    [
        "{'comment': 'c', 'command': {'tool': 'workspace/create', 'args': {'path': 'a', 'content': 'x\\n'}}}",
        '{"comment": "c", "done": False, "x": None, "command": {"tool": "workspace/create", "args": {"path": "a", "content": "x\\n"}}}',
        '{comment: "c", command: {tool: "workspace/create", args: {path: "a", content: "x\\n"}}}',
        '{"comment": "c", // why\n "command": {"tool": "workspace/create", "args": {"path": "a", "content": "x\\n"}}}',
        '```json\n{"comment": "c", "command": {"tool": "workspace/create", "args": {"path": "a", "content": "x\\n"}}\n```',
    ],
    ids=["single_quotes", "python_literals", "unquoted_keys", "comment", "missing_brace_in_fence"],
)
def test_json_text_repairs_what_small_models_write(text: str) -> None:
    decision = _prepared(JsonTextProtocol()).parse(LLMReply(content=text))
    assert decision.error is None, decision.error
    assert decision.actions == (ToolAction("workspace/create", {"path": "a", "content": "x\n"}, None),)
    assert decision.comment == "c"


def test_json_text_reads_a_native_tool_call_as_the_command() -> None:
    text = 'I will create it.\n<tool_call>\n{"name": "workspace__create", "arguments": {"path": "a"}}\n</tool_call>'
    decision = _prepared(JsonTextProtocol()).parse(LLMReply(content=text))
    assert decision == ParsedReply(comment="I will create it.", actions=(ToolAction("workspace/create", {"path": "a"}, None),), done=False)


def test_json_text_done_comment_with_markup_is_corrected() -> None:
    decision = _prepared(JsonTextProtocol()).parse(LLMReply(content='{"done": true, "comment": "ok [TOOL_CALLS]x{}"}'))
    assert decision.error is not None and "[TOOL_CALLS]" in decision.error and not decision.done


def test_native_protocol_reads_text_calls_in_order_with_done() -> None:
    text = (
        '<think>plan</think>Creating.<tool_call>{"name": "workspace__create", "arguments": {"path": "a"}}</tool_call>'
        '<tool_call>{"name": "done", "arguments": {"comment": "All set."}}</tool_call>'
    )
    decision = _prepared(ToolCallsProtocol()).parse(LLMReply(content=text))
    assert decision == ParsedReply(comment="All set.", actions=(ToolAction("workspace/create", {"path": "a"}, None),), done=True)


@pytest.mark.parametrize(
    "text",
    ['<tool_call>{"name": "nope", "arguments": {}}</tool_call>', "<tool_call>{broken</tool_call>", "Done. <|python_tag|>"],
)
def test_native_protocol_never_finishes_on_unreadable_markup(text: str) -> None:
    decision = _prepared(ToolCallsProtocol()).parse(LLMReply(content=text))
    assert decision.error is not None and not decision.done and decision.actions == ()


def test_native_done_call_whose_comment_holds_markup_is_corrected() -> None:
    reply = LLMReply(content="", tool_calls=(ToolCallRequest("c1", "done", {"comment": "ok <|call|>"}),))
    decision = _prepared(ToolCallsProtocol()).parse(reply)
    assert decision.error is not None and "<|call|>" in decision.error


def test_json_text_reads_a_native_done_call_as_done() -> None:
    text = '[TOOL_CALLS]done[ARGS]{"comment": "Wrote a.txt."}'
    decision = _prepared(JsonTextProtocol()).parse(LLMReply(content=text))
    assert decision == ParsedReply(comment="Wrote a.txt.", actions=(), done=True)

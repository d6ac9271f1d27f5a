"""`llm/hygiene.py`: whatever a model sends, the history holds storable, postable text."""

from __future__ import annotations

import json

from hypothesis import given
from hypothesis import strategies as st

from coding_agent.llm.hygiene import MAX_REPLY_CHARS, clean_text, clean_value, screen_reply
from coding_agent.llm.protocols import JsonTextProtocol, ToolCallsProtocol
from coding_agent.llm.types import LLMReply, ToolCallRequest

# Any code point, lone surrogates and NUL included (what JSON "\\uXXXX" escapes can carry).
ANY_TEXT = st.text(alphabet=st.characters(min_codepoint=0, max_codepoint=0x10FFFF))


@given(ANY_TEXT)
def test_clean_text_is_always_encodable_and_nul_free(text: str) -> None:
    cleaned = clean_text(text)
    cleaned.encode("utf-8")
    assert "\x00" not in cleaned


@given(st.text(alphabet=st.characters(blacklist_categories=("Cs",), blacklist_characters="\x00")))
def test_clean_text_keeps_valid_text_unchanged(text: str) -> None:
    assert clean_text(text) == text


def test_surrogate_pairs_join_and_lone_ones_are_replaced() -> None:
    assert clean_text("\ud83d\ude00") == "\U0001F600"
    assert clean_text("a\ud800b\udfffc") == "a\ufffdb\ufffdc"


@given(st.recursive(ANY_TEXT | st.integers() | st.none(), lambda inner: st.lists(inner) | st.dictionaries(ANY_TEXT, inner)))
def test_clean_value_makes_any_json_value_storable(value: object) -> None:
    cleaned = clean_value(value)
    stored = json.dumps(cleaned, ensure_ascii=False).encode("utf-8")  # raises on a lone surrogate
    assert json.loads(stored) == cleaned


def test_content_that_is_not_text_is_a_problem_for_both_protocols() -> None:
    reply = screen_reply(LLMReply(content=5))  # type: ignore[arg-type]
    assert reply.content == "" and "must be text, not int" in reply.problem
    for protocol in (JsonTextProtocol(), ToolCallsProtocol()):
        decision = protocol.parse(reply)
        assert decision.error == reply.problem and not decision.actions and not decision.done


def test_an_oversized_reply_is_cut_and_its_calls_dropped() -> None:
    call = ToolCallRequest(id="c1", name="workspace/create", arguments={"path": "a", "content": "x" * MAX_REPLY_CHARS})
    reply = screen_reply(LLMReply(content="hello", tool_calls=(call,)))
    assert reply.tool_calls == () and "over the limit" in reply.problem
    assert len(reply.content) < 3_000


def test_json_text_escapes_are_cleaned_after_decoding() -> None:
    text = '{"comment": "a\\u0000b\\ud800", "command": {"tool": "w/t", "args": {"k\\u0000": "v\\udfff"}}}'
    decision = JsonTextProtocol().parse(screen_reply(LLMReply(content=text)))
    assert decision.comment == "a\ufffdb\ufffd"
    assert decision.actions[0].args == {"k\ufffd": "v\ufffd"}

"""The JSON depth scan of webhook bodies (SPEC 15): exact on real JSON (brackets inside
strings, escaped quotes), and refusing, not recursing, on bodies deeper than the limit."""

from __future__ import annotations

import json

import pytest

from coding_agent.web.request_body import MAX_JSON_DEPTH, Refusal, json_depth, parse_json


def _nested(depth: int) -> bytes:
    return json.dumps(json.loads("[" * depth + "]" * depth)).encode()


@pytest.mark.parametrize(
    ("body", "depth"),
    [
        (b"{}", 1),
        (b'"just a string"', 0),
        (b'{"title": "[[[[ {{{{", "labels": [{"name": "x"}]}', 3),
        (b'{"body": "a \\" quote then [[[", "n": [1]}', 2),
        (b'["\\\\", [["\\\\\\"]"]]]', 3),
        (b'{"a": "never closed [[[[[[', 1),
    ],
)
def test_the_depth_leaves_strings_out(body: bytes, depth: int) -> None:
    assert json_depth(body) == depth


def test_a_webhook_payload_within_the_limit_is_parsed() -> None:
    assert parse_json(_nested(MAX_JSON_DEPTH)) is not None
    assert parse_json('{"comment": "ça [va] \\"bien\\""}'.encode()) == {"comment": 'ça [va] "bien"'}


@pytest.mark.parametrize(
    "body",
    [_nested(MAX_JSON_DEPTH + 1), b"[" * 500_000, b'{"a": ' + b"{" * 100_000, b'[{"a": [' * 30 + b"]}]" * 30],
    ids=["one-too-deep", "unclosed", "open-objects", "mixed"],
)
def test_a_body_nesting_too_deep_is_refused_with_400(body: bytes) -> None:
    with pytest.raises(Refusal) as refused:
        parse_json(body)
    assert (refused.value.status, refused.value.message) == (400, f"body nests deeper than {MAX_JSON_DEPTH} levels")


@pytest.mark.parametrize("body", [b"not json", b"\xff\xfe{}", b'{"a": 1', b"", "{}".encode("utf-16")])
def test_a_body_that_is_not_utf8_json_is_refused_with_400(body: bytes) -> None:
    with pytest.raises(Refusal) as refused:
        parse_json(body)
    assert refused.value.status == 400 and refused.value.message in ("body is not JSON", "body is not UTF-8 JSON")

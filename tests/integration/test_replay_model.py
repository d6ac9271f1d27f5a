"""The replay model server itself, over real HTTP: rendering, cursors, errors, recording."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from coding_agent.llm.tool_names import ToolNameCodec
from coding_agent.sandbox.replay_model import EXHAUSTED_COMMENT, ReplaySandbox, ReplayScript

SCRIPT: dict[str, Any] = {
    "model": "scripted-7b",
    "replies": [
        {"tool": "workspace/create", "args": {"path": "a.txt", "content": "x"}, "comment": "Creating"},
        {"done": "Finished"},
    ],
    "conversations": [{"match": "#7", "replies": [{"text": "special for seven"}]}],
}


@pytest.fixture(scope="module")
def sandbox() -> Iterator[ReplaySandbox]:
    with ReplaySandbox(SCRIPT) as running:
        yield running


@pytest.fixture
def http(sandbox: ReplaySandbox) -> Iterator[httpx.Client]:
    sandbox.model.load(SCRIPT)
    with httpx.Client(base_url=sandbox.url, timeout=5) as client:
        yield client


def _chat(http: httpx.Client, first: str, tools: list[str] | None = None, **extra: Any) -> httpx.Response:
    body: dict[str, Any] = {"model": "m", "messages": [{"role": "user", "content": first}], **extra}
    if tools:
        body["tools"] = [{"type": "function", "function": {"name": name, "parameters": {}}} for name in tools]
    return http.post("/v1/chat/completions", json=body)


def test_tool_step_is_json_text_without_tools(http: httpx.Client) -> None:
    message = _chat(http, "Issue #1").json()["choices"][0]["message"]
    assert json.loads(message["content"]) == {
        "comment": "Creating",
        "command": {"tool": "workspace/create", "args": {"path": "a.txt", "content": "x"}},
    }
    assert "tool_calls" not in message
    assert json.loads(_chat(http, "Issue #1").json()["choices"][0]["message"]["content"]) == {
        "done": True,
        "comment": "Finished",
    }


def test_tool_step_is_a_native_call_on_the_offered_name(http: httpx.Client, sandbox: ReplaySandbox) -> None:
    long_real = "workspace/" + "c" * 70
    codec = ToolNameCodec([long_real, "done"])
    assert codec.encode(long_real) != "workspace__" + "c" * 70  # too long: hashed
    sandbox.model.load({"replies": [{"tool": long_real, "args": {"k": 1}}, {"done": "bye"}]})
    first = _chat(http, "Issue #2", tools=codec.wire_names).json()["choices"][0]
    call = first["message"]["tool_calls"][0]
    assert first["finish_reason"] == "tool_calls"
    assert codec.decode(call["function"]["name"]) == long_real
    assert json.loads(call["function"]["arguments"]) == {"k": 1}
    done = _chat(http, "Issue #2", tools=codec.wire_names).json()["choices"][0]["message"]["tool_calls"][0]
    assert done["function"]["name"] == "done" and json.loads(done["function"]["arguments"]) == {"comment": "bye"}


def test_done_without_a_done_function_is_a_plain_final_message(http: httpx.Client) -> None:
    _chat(http, "Issue #3", tools=["workspace__create"])
    message = _chat(http, "Issue #3", tools=["workspace__create"]).json()["choices"][0]["message"]
    assert message["content"] == "Finished" and "tool_calls" not in message


def test_each_conversation_has_its_own_cursor_and_exhaustion_says_so(http: httpx.Client, sandbox: ReplaySandbox) -> None:
    assert "command" in _chat(http, "Issue #4").json()["choices"][0]["message"]["content"]
    assert "command" in _chat(http, "Issue #5").json()["choices"][0]["message"]["content"]
    _chat(http, "Issue #4")
    exhausted = json.loads(_chat(http, "Issue #4").json()["choices"][0]["message"]["content"])
    assert exhausted == {"done": True, "comment": EXHAUSTED_COMMENT}
    assert len({request.conversation for request in sandbox.requests}) == 2


def test_conversation_script_is_chosen_by_the_first_user_message(http: httpx.Client) -> None:
    body = {
        "model": "m",
        "messages": [
            {"role": "system", "content": "sys"},
            {"role": "user", "content": [{"type": "text", "text": "Please fix issue #7"}]},
            {"role": "assistant", "content": "earlier"},
            {"role": "user", "content": "a later message does not change the conversation"},
        ],
    }
    message = http.post("/v1/chat/completions", json=body).json()["choices"][0]["message"]
    assert message["content"] == "special for seven"


def test_status_step_answers_an_error_with_retry_after_then_moves_on(
    http: httpx.Client, sandbox: ReplaySandbox
) -> None:
    sandbox.model.load({"replies": [{"status": 429, "retry_after": 2, "message": "busy"}, {"text": "ok"}]})
    failed = _chat(http, "Issue #8")
    assert failed.status_code == 429 and failed.headers["retry-after"] == "2"
    assert failed.json()["error"]["message"] == "busy"
    ollama_failed = http.post("/api/chat", json={"model": "m", "messages": [{"role": "user", "content": "#9"}]})
    assert ollama_failed.status_code == 429 and ollama_failed.json() == {"error": "busy"}
    assert _chat(http, "Issue #8").json()["choices"][0]["message"]["content"] == "ok"


def test_raw_text_and_tool_calls_are_sent_as_written(http: httpx.Client, sandbox: ReplaySandbox) -> None:
    sandbox.model.load({"replies": [{"text": "Trying", "tool_calls": [{"name": "nope", "arguments": "{bad"}]}]})
    message = _chat(http, "Issue #10", tools=["done"]).json()["choices"][0]["message"]
    assert message["content"] == "Trying"
    assert message["tool_calls"][0]["function"] == {"name": "nope", "arguments": "{bad"}


def test_openai_stream_is_server_sent_events(http: httpx.Client) -> None:
    response = _chat(http, "Issue #11", tools=["workspace__create"], stream=True)
    assert response.headers["content-type"].startswith("text/event-stream")
    events = [line.removeprefix("data: ") for line in response.text.splitlines() if line.startswith("data: ")]
    assert events[-1] == "[DONE]"
    chunks = [json.loads(event) for event in events[:-1]]
    assert all(chunk["object"] == "chat.completion.chunk" for chunk in chunks)
    arguments = "".join(
        call["function"].get("arguments", "")
        for chunk in chunks
        for choice in chunk["choices"]
        for call in choice["delta"].get("tool_calls", [])
    )
    assert json.loads(arguments) == {"path": "a.txt", "content": "x"}
    assert "usage" not in chunks[-1]  # only when stream_options.include_usage asks for it


def test_ollama_chat_streams_ndjson_by_default_and_json_when_asked(http: httpx.Client) -> None:
    body = {"model": "m", "messages": [{"role": "user", "content": "Issue #12"}]}
    streamed = http.post("/api/chat", json=body)
    lines = [json.loads(line) for line in streamed.text.splitlines()]
    assert len(lines) >= 2 and lines[-1]["done"] is True and all(not line["done"] for line in lines[:-1])
    assert json.loads("".join(line["message"]["content"] for line in lines))["command"]["tool"] == "workspace/create"
    single = http.post("/api/chat", json={**body, "stream": False}).json()
    assert single["done"] is True and single["eval_count"] > 0 and single["prompt_eval_count"] > 0
    assert json.loads(single["message"]["content"])["done"] is True


def test_ollama_tool_calls_have_object_arguments(http: httpx.Client) -> None:
    body = {
        "model": "m",
        "stream": False,
        "messages": [{"role": "user", "content": "Issue #13"}],
        "tools": [{"type": "function", "function": {"name": "workspace__create", "parameters": {}}}],
    }
    call = http.post("/api/chat", json=body).json()["message"]["tool_calls"][0]
    assert call == {"function": {"name": "workspace__create", "arguments": {"path": "a.txt", "content": "x"}}}


def test_model_listings_and_version(http: httpx.Client) -> None:
    assert http.get("/v1/models").json()["data"][0]["id"] == "scripted-7b"
    assert http.get("/api/tags").json()["models"][0]["name"] == "scripted-7b"
    assert http.get("/api/version").json()["version"]


def test_requests_are_recorded_and_served(http: httpx.Client, sandbox: ReplaySandbox) -> None:
    _chat(http, "Issue #14", temperature=0.5)
    recorded = http.get("/_replay/requests").json()["requests"]
    assert recorded[-1]["path"] == "/v1/chat/completions"
    assert recorded[-1]["body"]["temperature"] == 0.5
    assert sandbox.requests[-1].body["messages"][0]["content"] == "Issue #14"
    http.post("/_replay/reset")
    assert http.get("/_replay/requests").json()["requests"] == []


def test_bad_request_body_is_a_400(http: httpx.Client) -> None:
    response = http.post("/v1/chat/completions", content=b"not json", headers={"content-type": "application/json"})
    assert response.status_code == 400


def test_script_loads_from_yaml_file(tmp_path: Path) -> None:
    path = tmp_path / "script.yaml"
    path.write_text("latency_seconds: 0.5\nreplies:\n  - tool: w/t\n    args: {a: 1}\n  - done: bye\n", encoding="utf-8")
    script = ReplayScript.from_file(path)
    assert script.latency_seconds == 0.5
    assert [step.kind for step in script.replies] == ["tool", "done"]
    assert script.replies[0].args == {"a": 1} and script.replies[1].comment == "bye"


@pytest.mark.parametrize(
    ("data", "problem"),
    [
        ({"replies": [{"tool": "w/t", "done": "x"}]}, r"replies\[0\]: a reply needs exactly one"),
        ({"replies": [{"toll": "w/t"}]}, r"replies\[0\]: unknown key\(s\) toll"),
        ({"replies": [{"status": 200}]}, r"status must be an HTTP error code"),
        ({"replies": "tool"}, r"must be a list"),
        ({"conversations": [{"replies": []}]}, r"conversations\[0\]: needs a `match`"),
        ({"reply": []}, r"unknown key\(s\) reply"),
    ],
)
def test_invalid_scripts_name_the_problem(data: dict[str, Any], problem: str) -> None:
    with pytest.raises(ValueError, match=problem):
        ReplayScript.from_dict(data)


def test_fill_puts_what_the_first_user_message_says_into_the_reply(http: httpx.Client, sandbox: ReplaySandbox) -> None:
    """`fill`: one script answers any task, naming it (the playground's replay model)."""
    sandbox.model.load(
        {
            "fill": {"number": r"#(\d+):", "title": r"#\d+: ([^\n]*)"},
            "replies": [
                {"tool": "workspace/create", "args": {"path": "NOTES-{{number}}.md", "content": "{{title}}\n"}, "comment": "On #{{number}}"},
                {"done": "Wrote NOTES-{{number}}.md about {{title}} {{unknown}}"},
                {"text": '{"thread_memory": "wrote NOTES-{{number}}.md"}'},
            ],
        }
    )
    message = _chat(http, "# Issue github:a/b#42: Add a {{number}} <b>logo</b>\n\nbody").json()["choices"][0]["message"]
    assert json.loads(message["content"]) == {
        "comment": "On #42",
        "command": {"tool": "workspace/create", "args": {"path": "NOTES-42.md", "content": "Add a {{number}} <b>logo</b>\n"}},
    }
    unmatched = json.loads(_chat(http, "no task heading here").json()["choices"][0]["message"]["content"])
    assert unmatched["command"]["args"] == {"path": "NOTES-.md", "content": "\n"}
    done = json.loads(_chat(http, "# Issue github:a/b#42: Add a {{number}} <b>logo</b>\n\nbody").json()["choices"][0]["message"]["content"])
    assert done == {"done": True, "comment": "Wrote NOTES-42.md about Add a {{number}} <b>logo</b> {{unknown}}"}
    text = _chat(http, "# Issue github:a/b#42: Add a {{number}} <b>logo</b>\n\nbody").json()["choices"][0]["message"]
    assert text["content"] == '{"thread_memory": "wrote NOTES-42.md"}'


def test_fill_needs_a_regex_with_one_group() -> None:
    with pytest.raises(ValueError, match=r"fill\.number: .*one group"):
        ReplayScript.from_dict({"fill": {"number": r"#\d+"}})
    with pytest.raises(ValueError, match=r"fill\.title: not a regular expression"):
        ReplayScript.from_dict({"fill": {"title": "(unclosed"}})

"""The dashboard (SPEC 11.3) over real HTTP: pages, JSON API, actions through the same
code as the CLI, /healthz, /metrics, the token beyond localhost, no secret in any
response, and a second server on a taken address."""

from __future__ import annotations

import json
import logging
import secrets
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any
from urllib.parse import quote

import httpx
import pytest

from coding_agent.config import AgentConfig, parse_config
from coding_agent.store.state import StateStore
from coding_agent.web.server import serving_dashboard

KEY = "github:acme/widgets#7"
DONE_KEY = "gitlab:acme/widgets!3"


def make_config(tmp_path: Path, **dashboard: Any) -> tuple[AgentConfig, list[str]]:
    hidden = ["ghp_" + secrets.token_hex(12), "sk-" + secrets.token_hex(12), secrets.token_urlsafe(16)]
    data = {
        "task_source": "github",
        "github": {"owner": "acme", "token": hidden[0]},
        "llm": {"provider": "openai", "openai": {"model": "m", "api_key": hidden[1]}},
        "database": {"url": f"sqlite:///{tmp_path / 'state.db'}"},
        "dashboard": {"bind": "127.0.0.1:0", "token": hidden[2], **dashboard},
    }
    return parse_config(data, env={}), hidden


def seed(store: StateStore, secret: str) -> None:
    store.runs.start_run("run-1", KEY, "worker-a", "alice")
    store.runs.heartbeat(KEY, "worker-a", 60, "run-1", steps=3, usages=[(100, 20)])
    store.runs.start_run("run-2", DONE_KEY, "worker-a", "bob")
    store.runs.finish_run("run-2", "failed", 2, error=f"forge said no to token {secret}")


@pytest.fixture
async def served(tmp_path: Path) -> AsyncIterator[tuple[str, StateStore, list[str]]]:
    config, hidden = make_config(tmp_path)
    store = StateStore(config.database.url)
    seed(store, hidden[0])
    async with serving_dashboard(config, store) as url:
        assert url is not None
        yield url, store, hidden
    store.close()


async def test_api_lists_tasks_details_and_usage(served: tuple[str, StateStore, list[str]]) -> None:
    url, _, _ = served
    async with httpx.AsyncClient(base_url=url) as client:
        tasks = (await client.get("/api/tasks")).json()["tasks"]
        detail = (await client.get(f"/api/tasks/{quote(KEY, safe='')}")).json()
        usage = (await client.get("/api/usage")).json()
        missing = await client.get("/api/tasks/github:acme/widgets%2399")
    by_key = {task["task"]: task for task in tasks}
    assert by_key[KEY]["state"] == "running" and by_key[KEY]["requester"] == "alice" and by_key[KEY]["steps"] == 3
    assert by_key[KEY]["tokens"] == 120 and by_key[KEY]["started_at"] and by_key[KEY]["finished_at"] is None
    assert by_key[DONE_KEY]["state"] == "failed" and by_key[DONE_KEY]["finished_at"]
    assert detail["task"] == KEY and [run["run"] for run in detail["runs"]] == ["run-1"]
    assert usage["requesters"]["alice"]["prompt_tokens"] == 100
    assert missing.status_code == 404


async def test_actions_go_through_the_cli_code(served: tuple[str, StateStore, list[str]]) -> None:
    url, store, _ = served
    async with httpx.AsyncClient(base_url=url) as client:
        paused = await client.post(f"/api/tasks/{quote(KEY, safe='')}/pause", json={})
        unknown = await client.post("/api/tasks/github:acme/nothing%231/stop", json={})
        not_paused = await client.post(f"/api/tasks/{quote(DONE_KEY, safe='')}/resume", json={})
    assert paused.status_code == 200 and store.steering.control_request(KEY) == "pause"
    assert unknown.status_code == 404 and "no running or paused run" in unknown.json()["error"]
    assert not_paused.status_code == 404


async def test_health_and_metrics(served: tuple[str, StateStore, list[str]]) -> None:
    url, _, _ = served
    async with httpx.AsyncClient(base_url=url) as client:
        health = await client.get("/healthz")
        metrics = await client.get("/metrics")
    assert health.status_code == 200 and health.json() == {"status": "ok"}
    assert metrics.headers["content-type"].startswith("text/plain")
    assert 'coding_agent_tasks{state="running"} 1.0' in metrics.text
    assert 'coding_agent_llm_tokens_total{kind="prompt"} 100.0' in metrics.text


async def test_no_secret_in_any_page_or_api_response(served: tuple[str, StateStore, list[str]]) -> None:
    url, _, hidden = served
    paths = ["/", "/usage", f"/tasks/{quote(KEY, safe='')}", f"/tasks/{quote(DONE_KEY, safe='')}", "/api/tasks",
             f"/api/tasks/{quote(DONE_KEY, safe='')}", "/api/usage", "/metrics", "/healthz", "/login"]  # fmt: skip
    async with httpx.AsyncClient(base_url=url) as client:
        bodies = [(await client.get(path)).text for path in paths]
    assert all(body for body in bodies)
    assert "forge said no to token" in bodies[3]
    for body in bodies:
        for secret in hidden:
            assert secret not in body


async def test_hostile_text_is_escaped(tmp_path: Path) -> None:
    config, _ = make_config(tmp_path)
    store = StateStore(config.database.url)
    hostile = "<img src=x onerror=alert(1)>"
    store.runs.start_run("run-x", "github:acme/widgets#9", "worker-a", hostile)
    async with serving_dashboard(config, store) as url, httpx.AsyncClient(base_url=str(url)) as client:
        pages = [(await client.get(path)).text for path in ("/", "/usage", "/tasks/github:acme/widgets%239")]
    store.close()
    for page in pages:
        assert hostile not in page and "&lt;img src=x" in page


async def test_beyond_localhost_every_page_needs_the_token(tmp_path: Path) -> None:
    config, hidden = make_config(tmp_path, bind="0.0.0.0:0")
    store = StateStore(config.database.url)
    seed(store, hidden[0])
    async with serving_dashboard(config, store) as url:
        assert url is not None
        local = url.replace("0.0.0.0", "127.0.0.1")
        async with httpx.AsyncClient(base_url=local) as client:
            refused = [(await client.get(path)).status_code for path in ("/", "/api/tasks", "/metrics", "/usage")]
            refused.append((await client.post(f"/api/tasks/{quote(KEY, safe='')}/pause", json={})).status_code)
            wrong = await client.get("/api/tasks", headers={"Authorization": "Bearer wrong"})
            right = await client.get("/api/tasks", headers={"Authorization": f"Bearer {hidden[2]}"})
            login = await client.post("/login", data={"token": hidden[2]})
            with_cookie = await client.get("/")
    store.close()
    assert refused == [401] * 5 and store.steering.control_request(KEY) is None
    assert wrong.status_code == 401 and right.status_code == 200
    assert login.status_code == 303 and with_cookie.status_code == 200 and KEY in with_cookie.text


def test_a_bind_beyond_localhost_without_a_token_is_a_config_error(tmp_path: Path) -> None:
    from coding_agent.errors import ConfigError

    with pytest.raises(ConfigError, match="dashboard"):
        make_config(tmp_path, bind="0.0.0.0:8080", token=None)


async def test_a_taken_address_is_one_warning_naming_dashboard_bind(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    config, _ = make_config(tmp_path)
    store = StateStore(config.database.url)
    async with serving_dashboard(config, store) as first:
        assert first is not None
        taken = config.model_copy(update={"dashboard": config.dashboard.model_copy(update={"bind": first[7:]})})
        with caplog.at_level(logging.WARNING):
            async with serving_dashboard(taken, store) as second:
                assert second is None
    store.close()
    warnings = [record.getMessage() for record in caplog.records if record.levelno == logging.WARNING]
    assert len(warnings) == 1 and f"dashboard.bind {first[7:]}" in warnings[0]


# -- a real run's tool calls, comments and plan (SPEC 11.3, 10.5) ----------------------


def _real_run(tmp_path: Path, function_calling: bool) -> tuple[AgentConfig, str, list[str]]:
    """A run against the sandbox forge and the replay model whose issue comment and tool
    result both carry configured secrets, and whose texts are hostile markup."""
    from coding_agent.sandbox.github import GitHubSandbox
    from coding_agent.sandbox.replay_model import ReplaySandbox
    from tests.e2e._steering import post_comment, run_cycle, steering_config
    from tests.e2e.conftest import GITHUB_BOT_TOKEN, LLM_API_KEY, GitHubForge, load_for_service

    with GitHubSandbox() as sandbox:
        forge = GitHubForge(sandbox)
        number = forge.open_task("issue", "Hello", "Please write s.txt.")
        post_comment(forge, "issue", number, "rita", f"{HOSTILE_COMMENT} token {GITHUB_BOT_TOKEN}")
        script = {
            "replies": [
                {"tool": "workspace/create", "args": {"path": "s.txt", "content": f"key {LLM_API_KEY}"}, "comment": "Writing s.txt."},
                {"tool": "workspace/view", "args": {"path": "s.txt"}, "comment": "Checking <b>s.txt</b>."},
                {"done": "Wrote s.txt."},
            ]
        }
        with ReplaySandbox(script) as model:
            setup = steering_config(tmp_path, [forge], model, function_calling=function_calling, dashboard={"bind": "127.0.0.1:0"})
            config = load_for_service(setup)
            report = run_cycle(config)
    assert [result.status for result in report.results] == ["done"]
    return config, report.results[0].task_key, [GITHUB_BOT_TOKEN, LLM_API_KEY]


HOSTILE_COMMENT = '<script>document.title="pwned"</script><img src=x onerror=alert(1)>'


@pytest.mark.parametrize("function_calling", [True, False], ids=["tool_calls", "json_text"])
async def test_task_page_shows_the_runs_tool_calls_and_comments(tmp_path: Path, function_calling: bool) -> None:
    import asyncio

    config, key, hidden = await asyncio.to_thread(_real_run, tmp_path, function_calling)
    store = StateStore(config.database.url)
    async with serving_dashboard(config, store) as url, httpx.AsyncClient(base_url=str(url)) as client:
        detail = (await client.get(f"/api/tasks/{quote(key, safe='')}")).json()
        page = (await client.get(f"/tasks/{quote(key, safe='')}")).text
        events = await _first_event(client, key)
        metrics = (await client.get("/metrics")).text
    store.close()
    # The run's forge requests, counted in sources/http.py, in the dashboard's /metrics.
    assert _sample(metrics, 'coding_agent_forge_requests_total{forge="github",outcome="2xx"}') >= 5

    calls = detail["tool_calls"]
    assert [(call["tool"], call["status"]) for call in calls] == [("workspace/create", "ok"), ("workspace/view", "ok")]
    assert "s.txt" in calls[0]["args"] and "key ***" in calls[1]["result"] and calls[0]["at"]
    seen = [comment for comment in detail["comments"] if not comment["posted"]]
    posted = [comment["body"] for comment in detail["comments"] if comment["posted"]]
    assert [comment["author"] for comment in seen] == ["rita"] and HOSTILE_COMMENT in seen[0]["body"]
    assert "untrusted-content" not in seen[0]["body"]
    assert posted[:2] == ["Writing s.txt.", "Checking <b>s.txt</b>."] and "Wrote s.txt." in posted[-1]
    assert detail["plan"] is None and events["tool_calls"] == calls
    assert "workspace/view" in page and "Writing s.txt." in page
    assert HOSTILE_COMMENT not in page and "&lt;script&gt;document.title" in page and "Checking &lt;b&gt;" in page
    for body in (page, json.dumps(detail), json.dumps(events)):
        for secret in hidden:
            assert secret not in body


async def _first_event(client: httpx.AsyncClient, key: str) -> dict[str, Any]:
    async with client.stream("GET", f"/tasks/{quote(key, safe='')}/events") as stream:
        async for line in stream.aiter_lines():
            if line.startswith("data: "):
                return json.loads(line[6:])
    raise AssertionError("the event stream ended without an event")


def test_a_secret_cut_by_shortening_is_still_redacted(tmp_path: Path) -> None:
    """Redaction comes before the cut: a secret straddling the limit never shows half."""
    from coding_agent.redaction import Redactor
    from coding_agent.web.activity import RESULT_CHARS, RunActivity

    secret = secrets.token_hex(20)
    run = tmp_path / "contexts" / "running" / "run-1"
    run.mkdir(parents=True)
    record = {"at": 0, "tool": "workspace/view", "args": {}, "is_error": False, "result": "x" * (RESULT_CHARS - 10) + secret}
    (run / "tools.jsonl").write_text(json.dumps(record) + "\n")
    calls = RunActivity(tmp_path / "contexts", Redactor([secret]), 10).tool_calls(run)
    assert secret[:9] not in calls[0]["result"] and calls[0]["result"].endswith("***")


def _sample(metrics: str, name: str) -> float:
    for line in metrics.splitlines():
        if line.startswith(name + " "):
            return float(line.split()[-1])
    raise AssertionError(f"{name} is not in /metrics")


async def test_forge_requests_are_counted_by_outcome(served: tuple[str, StateStore, list[str]]) -> None:
    """An answered request counts under its status class; one with no answer under error."""
    from coding_agent.sources.http import CachingTransport

    url, _, _ = served
    async with httpx.AsyncClient(base_url=url) as client:
        before = (await client.get("/metrics")).text
        transport = CachingTransport(5, forge="github")
        async with httpx.AsyncClient(transport=transport) as forge:
            await forge.get(url + "/api/nothing-here")
            with pytest.raises(httpx.ConnectError):
                await forge.get("http://127.0.0.1:9/")
        await transport.close_pool()
        after = (await client.get("/metrics")).text

    def count(outcome: str, text: str) -> float:
        try:
            return _sample(text, f'coding_agent_forge_requests_total{{forge="github",outcome="{outcome}"}}')
        except AssertionError:
            return 0.0

    assert count("4xx", after) == count("4xx", before) + 1
    assert count("error", after) == count("error", before) + 1

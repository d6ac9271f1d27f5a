"""What the dashboard tells an operator about every task (SPEC 11.3 as extended): tasks
in every state (done with a PR, failed, stopped, paused, running, waiting), seen in
headless Chromium against the real server, through the JSON API, in `/metrics` (checked
by `promtool`) and in `coding-agent status`."""

from __future__ import annotations

import asyncio
import shutil
import subprocess
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any
from urllib.parse import quote

import httpx
import pytest
import yaml
from playwright.async_api import Page, async_playwright, expect

from coding_agent.config import AgentConfig, parse_config
from coding_agent.store.state import StateStore
from coding_agent.web.server import serving_dashboard
from tests.integration._dashboard_seed import FORGE, HOSTILE_TITLE, SeededTasks, seed_every_state, write_plan
from tests.integration.test_operator_dashboard_browser import ARGS, chromium  # noqa: F401 - the fixture

Served = tuple[str, StateStore, SeededTasks, Path]


def _settings(tmp_path: Path) -> dict[str, Any]:
    return {
        "task_source": "github",
        "github": {"owner": "acme", "token": "t"},
        "llm": {"provider": "openai", "openai": {"model": "m"}},
        "database": {"url": f"sqlite:///{tmp_path / 'state.db'}"},
        "context_storage": {"base_dir": str(tmp_path / "contexts")},
        "dashboard": {"bind": "127.0.0.1:0"},
    }


def _config(tmp_path: Path) -> AgentConfig:
    return parse_config(_settings(tmp_path), env={})


@pytest.fixture
async def served(tmp_path: Path) -> AsyncIterator[Served]:
    config = _config(tmp_path)
    store = StateStore(config.database.url)
    tasks = seed_every_state(store)
    write_plan(tmp_path / "contexts", tasks.running_run, done=2, total=4)
    async with serving_dashboard(config, store) as url:
        assert url is not None
        yield url, store, tasks, tmp_path
    store.close()


def _row(page: Page, key: str) -> Any:
    return page.locator(f'tr[data-task="{key}"]')


async def test_every_row_says_what_its_task_is_and_filters_apply(served: Served, chromium: str) -> None:
    url, _, tasks, _ = served
    async with async_playwright() as playwright:
        browser = await playwright.chromium.launch(executable_path=chromium, args=ARGS)
        try:
            page = await browser.new_page()
            await page.goto(url + "/")
            done = _row(page, tasks.done)
            await expect(done.locator("a.title")).to_have_text("Add a --json flag to the export command")
            await expect(done.locator("a.issue")).to_have_attribute("href", f"{FORGE}/acme/widgets/issues/1")
            await expect(done.locator("a.change")).to_have_attribute("href", f"{FORGE}/acme/widgets/pull/11")
            await expect(done.locator(".repo")).to_have_text("acme/widgets")
            await expect(done.locator(".pill")).to_have_class("pill s-done")
            await expect(_row(page, tasks.failed).locator(".reason")).to_contain_text("The model was stuck")
            await expect(_row(page, tasks.stopped).locator(".reason")).to_have_text("An operator stopped the coding agent (coding-agent stop).")
            await expect(_row(page, tasks.paused).locator(".pill")).to_have_text("paused")
            await expect(_row(page, tasks.running).locator(".doing")).to_contain_text("a3 Write config module part 3")
            waiting = _row(page, tasks.waiting)
            await expect(waiting.locator(".pill")).to_have_text("waiting")
            await expect(waiting.locator(".queue")).to_have_text("#1 in queue")
            await expect(waiting.locator("a.title")).to_have_text("Translate the README into Japanese: 日本語")
            hostile = _row(page, tasks.hostile)
            await expect(hostile.locator("a.title")).to_have_text(HOSTILE_TITLE)  # as text, all 300 characters
            await expect(hostile.locator(".queue")).to_have_text("#2 in queue")
            assert await page.evaluate("window.__pwned") is None and await page.locator("tbody img").count() == 0

            await page.select_option("#filter-state", "failed")  # submits on change
            await expect(page.locator("#task-rows tr")).to_have_count(1)
            await expect(_row(page, tasks.failed)).to_be_visible()
            await page.goto(url + "/?repository=acme%2Fgadgets&requester=alice")
            await expect(page.locator("#task-rows tr")).to_have_count(1)
            await expect(_row(page, tasks.stopped)).to_be_visible()
            await expect(page.locator("#filter-repository")).to_have_value("acme/gadgets")
        finally:
            await browser.close()


async def test_the_list_follows_state_changes_without_a_reload(served: Served, chromium: str) -> None:
    url, store, tasks, _ = served
    async with async_playwright() as playwright:
        browser = await playwright.chromium.launch(executable_path=chromium, args=ARGS)
        try:
            page = await browser.new_page()
            await page.goto(url + "/")
            await expect(_row(page, tasks.running).locator(".pill")).to_have_text("running")
            await expect(page.locator("#live")).not_to_have_class("live off")
            await asyncio.to_thread(store.runs.finish_run, tasks.running_run, "done", 9)
            await expect(_row(page, tasks.running).locator(".pill")).to_have_text("done")
            await asyncio.to_thread(store.runs.start_run, "run-waiting", tasks.waiting, "worker-a", "dora")
            await expect(_row(page, tasks.waiting).locator(".requester")).to_have_text("dora")
        finally:
            await browser.close()


async def test_the_task_page_agrees_with_itself_through_a_stop(served: Served, chromium: str) -> None:
    """Header, Runs table, plan and buttons come from one stream: during the stop and after
    it they say the same thing, and an ended task's buttons are all disabled."""
    url, store, tasks, _ = served
    async with async_playwright() as playwright:
        browser = await playwright.chromium.launch(executable_path=chromium, args=ARGS)
        try:
            page = await browser.new_page()
            await page.goto(f"{url}/tasks/{quote(tasks.running, safe='')}")
            await expect(page.locator("#title")).to_have_text("Speed up the CSV import")
            await expect(page.locator("#issue-link")).to_have_attribute("href", f"{FORGE}/acme/widgets/issues/5")
            await expect(page.locator("#plan li")).to_have_count(4)
            await expect(page.locator("#plan li.done")).to_have_count(2)
            await expect(page.locator("#plan li.running")).to_contain_text("step 2/")
            assert "**" not in await page.locator("#plan-section").inner_text()  # a checklist, not Markdown
            await expect(page.locator("#resume")).to_be_disabled()

            dialogs: list[str] = []
            page.once("dialog", lambda dialog: (dialogs.append(dialog.message), asyncio.ensure_future(dialog.accept())))
            await page.locator("#stop").click()
            await expect(page.locator("#message")).to_contain_text("stop requested")
            assert dialogs and tasks.running in dialogs[0]
            await expect(page.locator("#stop")).to_be_disabled()  # asked once is enough

            await asyncio.to_thread(store.runs.heartbeat, tasks.running, "worker-a", 600, tasks.running_run, 6, [(100, 10)])
            await expect(page.locator("#steps")).to_have_text("6")
            await expect(page.locator("#runs tbody tr").first.locator("td").nth(2)).to_have_text("6")

            await asyncio.to_thread(store.steering.record_final, tasks.running_run, "stopped", "## ⛔ Task stopped\n\nAn operator stopped the coding agent.")
            await asyncio.to_thread(store.runs.finish_run, tasks.running_run, "stopped", 6)
            await expect(page.locator("#state")).to_have_text("stopped")
            await expect(page.locator("#runs .pill").first).to_have_text("stopped")
            await expect(page.locator("#phase")).to_have_text("stopped")
            await expect(page.locator("#plan li.running")).to_have_count(0)
            await expect(page.locator("#reason")).to_have_text("An operator stopped the coding agent.")
            for button in ("#pause", "#resume", "#stop"):
                await expect(page.locator(button)).to_be_disabled()

            await page.goto(f"{url}/tasks/{quote(tasks.done, safe='')}")
            await expect(page.locator("#change-link")).to_have_attribute("href", f"{FORGE}/acme/widgets/pull/11")
            for button in ("#pause", "#resume", "#stop"):
                await expect(page.locator(button)).to_be_disabled()
        finally:
            await browser.close()


async def test_a_refused_action_shows_its_error(served: Served, chromium: str) -> None:
    """The run ended between the page's last update and the click: the API refuses, and
    the page says why instead of staying silent."""
    url, store, tasks, _ = served
    async with async_playwright() as playwright:
        browser = await playwright.chromium.launch(executable_path=chromium, args=ARGS)
        try:
            page = await browser.new_page()
            await page.goto(f"{url}/tasks/{quote(tasks.paused, safe='')}")
            await expect(page.locator("#live")).not_to_have_class("live off")
            await page.evaluate("events.close()")  # the page no longer hears of changes
            await asyncio.to_thread(store.runs.finish_run, "run-paused", "failed", 4, "gone")
            await page.locator("#resume").click()
            await expect(page.locator("#message")).to_have_text(f"{tasks.paused} has no paused run")
            await expect(page.locator("#message")).to_have_class("error")
        finally:
            await browser.close()


async def test_the_api_answers_for_a_waiting_task_and_filters(served: Served) -> None:
    url, _, tasks, _ = served
    async with httpx.AsyncClient(base_url=url) as client:
        waiting = (await client.get(f"/api/tasks/{quote(tasks.waiting, safe='')}")).json()
        listed = (await client.get("/api/tasks")).json()["tasks"]
        gadgets = (await client.get("/api/tasks", params={"repository": "acme/gadgets"})).json()["tasks"]
        bad = await client.get("/api/tasks", params={"state": "<b>"})
        usage = (await client.get("/api/usage")).json()
        usage_page = (await client.get("/usage")).text
    assert waiting["state"] == "waiting" and waiting["queue_position"] == 1 and waiting["runs"] == []
    assert waiting["title"] == "Translate the README into Japanese: 日本語" and not any(waiting["actions"].values())
    assert [row["task"] for row in listed[:2]] == [tasks.waiting, tasks.hostile]
    done = next(row for row in listed if row["task"] == tasks.done)
    assert done["kind"] == "issue" and done["repository"] == "acme/widgets" and done["change_url"].endswith("/pull/11")
    assert {row["repository"] for row in gadgets} == {"acme/gadgets"} and len(gadgets) == 3
    assert bad.status_code == 400 and "unknown state" in bad.json()["error"]
    assert usage["repositories"]["acme/widgets"]["runs"] == 3 and usage["requesters"]["alice"]["runs"] == 2
    assert usage["total"]["tokens"] == sum(entry["tokens"] for entry in usage["tasks"].values()) and usage["total"]["runs"] == 5
    assert f'href="/tasks/{quote(tasks.done, safe="")}"' in usage_page and "<th></th>" not in usage_page


async def test_metrics_pass_promtool_with_queue_depth_gauges_counters_and_histograms(served: Served) -> None:
    url, _, _, tmp_path = served
    promtool = shutil.which("promtool")
    if promtool is None:
        pytest.fail("promtool is not installed (./dev test installs Debian's prometheus package)")
    async with httpx.AsyncClient(base_url=url) as client:
        metrics = (await client.get("/metrics")).text
    checked = subprocess.run([promtool, "check", "metrics"], input=metrics, capture_output=True, text=True, timeout=60)
    assert checked.returncode == 0, checked.stdout + checked.stderr
    lines = set(metrics.splitlines())
    assert "# TYPE coding_agent_runs gauge" in lines and 'coding_agent_runs{state="running"} 1.0' in lines
    assert "# TYPE coding_agent_runs_finished_total counter" in lines
    assert 'coding_agent_runs_finished_total{outcome="done"} 1.0' in lines
    assert "coding_agent_queue_depth 2.0" in lines and 'coding_agent_tasks{state="waiting"} 2.0' in lines
    assert 'coding_agent_run_duration_seconds_count{outcome="failed"} 1.0' in lines
    assert 'coding_agent_run_steps_bucket{le="10.0",outcome="done"} 1.0' in lines
    assert "# TYPE coding_agent_model_request_duration_seconds histogram" in lines
    assert "acme" not in metrics  # no label carries user text


def test_status_shows_titles_requesters_and_totals_per_requester_and_repository(tmp_path: Path) -> None:
    store = StateStore(_config(tmp_path).database.url)
    tasks = seed_every_state(store)
    store.tasks.note_task(tasks.paused, "Document the plugin API \x1b[2J", f"{FORGE}/acme/gadgets/issues/4")
    store.close()
    path = tmp_path / "config.yaml"
    path.write_text(yaml.safe_dump(_settings(tmp_path)))
    result = subprocess.run(
        [sys.executable, "-m", "coding_agent.cli", "status", "--config", str(path)],
        capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    out = result.stdout
    assert f"{tasks.waiting}  waiting  #1 in queue" in out and "Translate the README into Japanese" in out
    assert f"{tasks.done}  done" in out and "requester=alice" in out and "PR/MR: https://github.example/acme/widgets/pull/11" in out
    assert "reason: The model was stuck" in out and "\x1b" not in out
    requesters = out.split("tokens per requester:")[1].split("tokens per repository:")[0]
    assert "alice" in requesters and "tokens=66634" in requesters  # 22,478 + 44,156
    assert "acme/widgets" in out.split("tokens per repository:")[1]
    assert "total: tokens=" in out and "runs=5" in out

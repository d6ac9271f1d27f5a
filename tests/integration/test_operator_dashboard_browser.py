"""The dashboard in a real browser: headless system Chromium driven by Playwright (never
`playwright install`). A task appears, its progress updates without a reload, and the
pause button pauses it (through the same code as `coding-agent pause`)."""

from __future__ import annotations

import asyncio
import contextlib
import shutil
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
from playwright.async_api import async_playwright, expect

from coding_agent.config import AgentConfig, parse_config
from coding_agent.store.state import StateStore
from coding_agent.web.server import serving_dashboard
from tests.support.waiting import wait_for

CHROMIUM = "/usr/bin/chromium"
ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
        "--disable-component-update", "--no-first-run"]  # fmt: skip
KEY = "github:acme/widgets#12"


@pytest.fixture
def chromium() -> str:
    if not Path(CHROMIUM).exists() and shutil.which("chromium") is None:
        pytest.fail("chromium is not installed (./dev test installs the Debian package)")
    return CHROMIUM


def _one_running_task(tmp_path: Path) -> tuple[AgentConfig, StateStore]:
    """A local dashboard's config (no token) and a store holding KEY's one running run."""
    config = parse_config(
        {
            "task_source": "github",
            "github": {"owner": "acme", "token": "t"},
            "llm": {"provider": "openai", "openai": {"model": "m"}},
            "database": {"url": f"sqlite:///{tmp_path / 'state.db'}"},
            "dashboard": {"bind": "127.0.0.1:0"},
        },
        env={},
    )
    store = StateStore(config.database.url)
    store.runs.start_run("run-1", KEY, "worker-a", "alice")
    store.runs.heartbeat(KEY, "worker-a", 60, "run-1", steps=1)
    return config, store


async def test_task_appears_updates_live_and_pauses(tmp_path: Path, chromium: str) -> None:
    config, store = _one_running_task(tmp_path)
    async with serving_dashboard(config, store) as url, async_playwright() as playwright:
        assert url is not None
        browser = await playwright.chromium.launch(executable_path=chromium, args=ARGS)
        try:
            page = await browser.new_page()
            await page.goto(url + "/")
            row = page.locator(f'tr[data-task="{KEY}"]')
            await expect(row).to_contain_text("running")
            await expect(row).to_contain_text("alice")

            await row.get_by_role("link").click()
            await expect(page.locator("#steps")).to_have_text("1")
            store.runs.heartbeat(KEY, "worker-a", 60, "run-1", steps=4, usages=[(50, 7)])
            await expect(page.locator("#steps")).to_have_text("4")  # no reload: server-sent events
            await expect(page.locator("#tokens")).to_have_text("57")

            await page.locator("#pause").click()
            await expect(page.locator("#message")).to_contain_text("pause requested")
            wait_for(lambda: store.steering.control_request(KEY) == "pause", timeout=10, what="the pause request")
            store.steering.pause_run("run-1", 4, hold=True)
            await expect(page.locator("#state")).to_have_text("paused")
        finally:
            await browser.close()
    store.close()


HOSTILE = '<img src=x onerror="window.__pwned = 1"><script>window.__pwned = 2</script>'


async def test_a_planned_run_shows_its_checklist_tool_calls_and_comments_live(tmp_path: Path, chromium: str) -> None:
    """A real planned run (sandbox forge, replay model) held before action a2: the page
    shows a1 ticked, its tool call and the issue's comment (as text, never as markup);
    released, the rest ticks and the later tool calls appear without a reload."""
    import threading
    from urllib.parse import quote

    from coding_agent.sandbox.github import GitHubSandbox
    from coding_agent.sandbox.replay_model import ReplaySandbox
    from tests.e2e._planning import create_then_done, plan, planning_config
    from tests.e2e._steering import post_comment, run_cycle
    from tests.e2e.conftest import GITHUB_BOT_TOKEN, GitHubForge, load_for_service

    reached, release = threading.Event(), threading.Event()

    def hold(_: dict) -> None:  # type: ignore[type-arg]
        reached.set()
        release.wait(120)

    phases = {
        "planning": [{"plan": plan()}],
        "execution a1": create_then_done("a1", "a.txt"),
        "execution a2": create_then_done("a2", "b.txt", before={"hold": {}}),
        "execution a3": create_then_done("a3", "c.txt"),
        "reflection": [{"reflection": {"status": "success", "evaluation": "on track", "issues_identified": [], "plan_revision_needed": False}}],
        "verification": [{"verification": {"verification_passed": True, "issues_found": [], "placeholder_detected": {"count": 0, "locations": []}}}],
        "completion": [{"done": "Wrote a.txt, b.txt and c.txt."}],
    }
    with GitHubSandbox() as sandbox, ReplaySandbox({"phases": phases}, actions={"hold": hold}) as model:
        forge = GitHubForge(sandbox)
        number = forge.open_task("issue", "Three files", "Please write a, b and c.")
        post_comment(forge, "issue", number, "rita", f"{HOSTILE} {GITHUB_BOT_TOKEN}")
        config = load_for_service(planning_config(tmp_path, [forge], model, extra={"dashboard": {"bind": "127.0.0.1:0"}}, reflection={"trigger_interval": 2}))
        store = StateStore(config.database.url)
        key = f"github:acme/widgets#{number}"
        run = asyncio.create_task(asyncio.to_thread(run_cycle, config))
        try:
            async with serving_dashboard(config, store) as url, async_playwright() as playwright:
                assert url is not None
                assert await asyncio.to_thread(reached.wait, 120), "the run never reached action a2"
                browser = await playwright.chromium.launch(executable_path=chromium, args=ARGS)
                try:
                    page = await browser.new_page()
                    await page.goto(f"{url}/tasks/{quote(key, safe='')}")
                    checklist = page.locator("#plan li")
                    await expect(checklist).to_have_count(3)
                    await expect(page.locator("#plan li.done")).to_have_count(1)
                    await expect(checklist.nth(0)).to_contain_text("a1")
                    await expect(page.locator("#tool-calls tbody tr")).to_have_count(1)
                    await expect(page.locator("#tool-calls tbody")).to_contain_text("workspace/create")
                    await expect(page.locator("#comments")).to_contain_text('<script>window.__pwned = 2</script>')

                    release.set()
                    await expect(page.locator("#plan li.done")).to_have_count(3, timeout=60_000)  # no reload
                    await expect(page.locator("#tool-calls tbody tr")).to_have_count(3)
                    await expect(page.locator("#state")).to_have_text("done", timeout=60_000)
                    await expect(page.locator("#comments")).to_contain_text("Wrote a.txt, b.txt and c.txt.")
                    assert await page.evaluate("window.__pwned") is None
                    assert GITHUB_BOT_TOKEN not in await page.content()
                finally:
                    await browser.close()
        finally:
            release.set()
            report = await run
            store.close()
    assert [result.status for result in report.results] == ["done"]


@contextlib.contextmanager
def attacker_site(pages: dict[str, str]) -> Iterator[int]:
    """A second local web server, on another port, serving `pages` (path -> HTML); yields its port."""

    class Pages(BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802 - the handler's protocol
            body = pages.get(self.path, "").encode()
            self.send_response(200 if body else 404)
            self.send_header("Content-Type", "text/html; charset=utf-8")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: object) -> None:
            return None

    server = ThreadingHTTPServer(("127.0.0.1", 0), Pages)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield server.server_address[1]
    finally:
        server.shutdown()
        server.server_close()
        thread.join()


def _auto_submit(action: str, enctype: str, field: str, value: str) -> str:
    """A page that posts a form to `action` as soon as it loads (`field`/`value` HTML-safe)."""
    return (f'<!doctype html><form id="f" method="post" action="{action}" enctype="{enctype}">'
            f'<input type="hidden" name=\'{field}\' value=\'{value}\'></form>'
            '<script>document.getElementById("f").submit()</script>')  # fmt: skip


async def test_another_site_can_neither_steer_nor_read_the_dashboard(tmp_path: Path, chromium: str) -> None:
    """No token (bound to localhost): a page on another site (and one on another port of
    localhost) auto-submits a form to stop the task, and a DNS-rebound name asks for
    /api/tasks; neither works, and the dashboard's own Pause and Stop buttons still do."""
    from urllib.parse import quote, urlsplit

    config, store = _one_running_task(tmp_path)
    async with serving_dashboard(config, store) as url, async_playwright() as playwright:
        assert url is not None
        port = urlsplit(url).port
        stop = f"{url}/api/tasks/{quote(KEY, safe='')}/stop"
        pages = {
            "/form": _auto_submit(stop, "application/x-www-form-urlencoded", "confirm", "1"),
            "/text": _auto_submit(stop, "text/plain", '{"a":"', '"}'),  # a body that reads as JSON
        }
        # evil.example and rebind.example resolve to this machine, as an attacker's DNS would make them.
        resolve = "--host-resolver-rules=MAP evil.example 127.0.0.1, MAP rebind.example 127.0.0.1"
        with attacker_site(pages) as attacker_port:
            browser = await playwright.chromium.launch(executable_path=chromium, args=[*ARGS, resolve])
            try:
                page = await browser.new_page()
                for attacker in (f"http://evil.example:{attacker_port}/form", f"http://evil.example:{attacker_port}/text",
                                 f"http://127.0.0.1:{attacker_port}/form"):  # fmt: skip
                    async with page.expect_response(lambda response: response.url == stop) as submitted:
                        await page.goto(attacker)
                    assert (await submitted.value).status == 403, attacker
                assert store.steering.control_request(KEY) is None

                rebound = await page.goto(f"http://rebind.example:{port}/api/tasks")
                assert rebound is not None and rebound.status == 421
                assert KEY not in await rebound.text()

                await page.goto(f"{url}/tasks/{quote(KEY, safe='')}")
                await page.locator("#pause").click()
                await expect(page.locator("#message")).to_contain_text("pause requested")
                assert store.steering.control_request(KEY) == "pause"
                page.once("dialog", lambda dialog: asyncio.ensure_future(dialog.accept()))  # Stop asks first
                await page.locator("#stop").click()
                await expect(page.locator("#message")).to_contain_text("stop requested")
                assert store.steering.control_request(KEY) == "stop"
            finally:
                await browser.close()
    store.close()

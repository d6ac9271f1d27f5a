"""The dashboard in a real browser: headless system Chromium driven by Playwright (never
`playwright install`). A task appears, its progress updates without a reload, and the
pause button pauses it (through the same code as `coding-agent pause`)."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from playwright.async_api import async_playwright, expect

from coding_agent.config import parse_config
from coding_agent.runtime.state_store import StateStore
from coding_agent.testing.waiting import wait_for
from coding_agent.web.server import serving_dashboard

CHROMIUM = "/usr/bin/chromium"
ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
        "--disable-component-update", "--no-first-run"]  # fmt: skip
KEY = "github:acme/widgets#12"


@pytest.fixture
def chromium() -> str:
    if not Path(CHROMIUM).exists() and shutil.which("chromium") is None:
        pytest.fail("chromium is not installed (./dev test installs the Debian package)")
    return CHROMIUM


async def test_task_appears_updates_live_and_pauses(tmp_path: Path, chromium: str) -> None:
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
    store.start_run("run-1", KEY, "worker-a", "alice")
    store.heartbeat(KEY, "worker-a", 60, "run-1", steps=1)
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
            store.heartbeat(KEY, "worker-a", 60, "run-1", steps=4, usages=[(50, 7)])
            await expect(page.locator("#steps")).to_have_text("4")  # no reload: server-sent events
            await expect(page.locator("#tokens")).to_have_text("57")

            await page.locator("#pause").click()
            await expect(page.locator("#message")).to_contain_text("pause requested")
            wait_for(lambda: store.control_request(KEY) == "pause", timeout=10, what="the pause request")
            store.pause_run("run-1", 4, hold=True)
            await expect(page.locator("#state")).to_have_text("paused")
        finally:
            await browser.close()
    store.close()

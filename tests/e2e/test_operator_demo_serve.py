"""`coding-agent demo --serve` as a newcomer plays with it (SPEC 12), in a real browser
(headless system Chromium): open an issue on the sandbox forge's page, label it and see
it reach done on the dashboard; on a second one, comment while it runs (the model is
sent the comment) and unassign the bot (it stops); Ctrl-C ends it and removes its files,
unless `--dir` keeps them.

The dashboard is read through its JSON API (`/api/tasks`), the model's side through the
replay model's `/_replay/requests`: the URLs are the ones the command prints."""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from playwright.async_api import Locator, Page, async_playwright, expect

from tests.integration.test_operator_dashboard_browser import ARGS, chromium  # noqa: F401 (the fixture)
from tests.support.waiting import wait_for, wait_until

TASK = "github:demo/hello-world#{}"
URL_LINES = {
    # The page's URL carries the run's secret (`?key=`), which its API needs too.
    "forge": re.compile(r"^Sandbox forge page: (http://127\.0\.0\.1:\d+/_playground/(?:\?key=[\w-]+)?)", re.M),
    "dashboard": re.compile(r"^Dashboard: (http://127\.0\.0\.1:\d+)", re.M),
    "model": re.compile(r"^Model: the replay model \(scripted\) at (http://127\.0\.0\.1:\d+)", re.M),
}


class Playground:
    """The `demo --serve` process, its output files and the URLs it printed."""

    def __init__(self, directory: Path, *args: str, env: dict[str, str] | None = None) -> None:
        self.scratch = directory / "tmp"
        self.scratch.mkdir()
        self.stdout = directory / "stdout.txt"
        self.stderr = directory / "stderr.txt"
        env = {**(env or os.environ), "TMPDIR": str(self.scratch), "GITHUB_TOKEN": "ghp_not_the_sandbox_token_5e1b"}
        with self.stdout.open("w") as out, self.stderr.open("w") as err:
            self.process = subprocess.Popen(
                [sys.executable, "-m", "coding_agent.cli", "demo", "--serve", *args],
                cwd=directory, env=env, stdout=out, stderr=err, text=True,
            )  # fmt: skip
        self.urls = wait_for(self._printed_urls, timeout=120, what="demo --serve to print its URLs")

    def output(self) -> str:
        return self.stdout.read_text() + self.stderr.read_text()[-5000:]

    def _printed_urls(self) -> dict[str, str] | None:
        assert self.process.poll() is None, f"demo --serve exited early:\n{self.output()}"
        text = self.stdout.read_text()
        found = {name: pattern.search(text) for name, pattern in URL_LINES.items()}
        return {name: match.group(1) for name, match in found.items() if match} if all(found.values()) else None

    @property
    def api(self) -> str:
        """The playground API's root (`.../_playground/`), without the secret."""
        return self.urls["forge"].split("?", 1)[0]

    @property
    def key(self) -> str:
        """The run's secret, as the printed URL carries it ("" when it carries none)."""
        return self.urls["forge"].partition("?key=")[2]

    def tasks(self) -> dict[str, dict[str, Any]]:
        rows = httpx.get(self.urls["dashboard"] + "/api/tasks", timeout=10).json()["tasks"]
        return {row["task"]: row for row in rows}

    def state_of(self, number: int) -> str | None:
        row = self.tasks().get(TASK.format(number))
        return row["state"] if row else None

    def model_was_sent(self, text: str) -> bool:
        requests = httpx.get(self.urls["model"] + "/_replay/requests", timeout=10).json()["requests"]
        return any(
            message.get("role") == "user" and text in str(message.get("content"))
            for request in requests
            for message in request["body"].get("messages", [])
        )

    def interrupt(self) -> int:
        self.process.send_signal(signal.SIGINT)
        return self.process.wait(timeout=120)

    def kill(self) -> None:
        if self.process.poll() is None:
            self.process.kill()
            self.process.wait(timeout=30)


@pytest.fixture
def playground(tmp_path: Path) -> Iterator[Playground]:
    running = Playground(tmp_path)
    try:
        yield running
    finally:
        running.kill()


async def _open_issue(page: Page, title: str, body: str) -> int:
    await page.locator("#new-title").fill(title)
    await page.locator("#new-body").fill(body)
    await page.locator("#open-issue").click()
    section = page.locator("section.issue", has=page.locator("h2", has_text=title))
    await expect(section).to_be_visible()
    return int(await section.get_attribute("data-issue") or 0)


def _section(page: Page, number: int) -> Locator:
    return page.locator(f'section.issue[data-issue="{number}"]')


@pytest.mark.long
async def test_open_label_watch_done_then_comment_and_unassign_a_running_one(
    playground: Playground, chromium: str  # noqa: F811 (the fixture)
) -> None:
    async with async_playwright() as driver:
        browser = await driver.chromium.launch(executable_path=chromium, args=ARGS)
        try:
            page = await browser.new_page()
            await page.goto(playground.urls["forge"])
            await expect(page.locator("body")).to_contain_text("Open an issue")
            assert await page.locator("a", has_text="the dashboard").get_attribute("href") == playground.urls["dashboard"]

            first = await _open_issue(page, "Add a <b>kite</b>", "A blue one.")
            await _section(page, first).locator("button.label").click()
            await wait_until(lambda: playground.state_of(first) == "done", timeout=180, what=f"#{first} done on the dashboard")
            await expect(_section(page, first).locator(".labels")).to_contain_text("coding agent done")
            await expect(_section(page, first).locator(".pulls")).to_contain_text(f"NOTES-{first}.md")
            await expect(_section(page, first).locator("h2 b")).to_have_count(0)  # the title is text, not markup

            second = await _open_issue(page, "Add a boat", "A red one.")
            await _section(page, second).locator("button.label").click()
            # Running, and past its start: comments older than the run are its context, not news.
            asked = f"{TASK.format(second)}: Add a boat"
            await wait_until(lambda: playground.model_was_sent(asked), timeout=120, what=f"#{second} to reach the model")
            assert playground.state_of(second) == "running"
            await _section(page, second).locator("textarea.comment-body").fill("Make it a sailing boat, please.")
            await _section(page, second).locator("button.comment").click()
            sent = "[New Comment from @octocat]:\nMake it a sailing boat, please."
            await wait_until(lambda: playground.model_was_sent(sent), timeout=120, what="the comment to reach the model")
            await _section(page, second).locator("button.unassign").click()
            await wait_until(lambda: playground.state_of(second) == "stopped", timeout=120, what=f"#{second} stopped")
            await expect(_section(page, second).locator(".labels")).to_contain_text("coding agent stopped")
            await expect(_section(page, second).locator(".assignees")).not_to_contain_text("coding-agent-bot")
        finally:
            await browser.close()
    assert playground.interrupt() == 0, playground.output()
    assert list(playground.scratch.iterdir()) == []  # its temp directory is gone
    assert "ghp_not_the_sandbox_token_5e1b" not in playground.output()
    assert "poll: 0 pending task(s), 0 run(s)" not in playground.stderr.read_text()  # idle polls stay quiet


@pytest.mark.long
def test_dir_keeps_the_playground_files(tmp_path: Path) -> None:
    kept = tmp_path / "kept"
    playground = Playground(tmp_path, "--dir", str(kept))
    try:
        created = httpx.post(playground.api + "issues", params={"key": playground.key}, json={"title": "Tidy up"}, timeout=10)
        assert created.status_code == 201
        assert playground.interrupt() == 0, playground.output()
    finally:
        playground.kill()
    assert (kept / "state.db").is_file()
    assert f"kept in {kept}" in playground.stdout.read_text()


def test_the_playground_and_its_forge_answer_only_with_this_runs_secrets(playground: Playground) -> None:
    """SPEC 15 "Run unsandboxed by accident": another user of this machine reaches the
    loopback port too, but not the printed URL. Without its secret the page and every API
    call are refused; the sandbox forge's bot token is not a fixed string either; with the
    URL's secret (or the cookie the page sets from it) all works."""
    base = playground.api
    for method, path, body in [("GET", "", None), ("GET", "issues", None), ("POST", "issues", {"title": "Steal a run"})]:
        for key in (None, "", "wrong-" + "0" * 20):
            refused = httpx.request(method, base + path, params={"key": key} if key is not None else None, json=body, timeout=10)
            assert refused.status_code in (401, 403), (method, path, key, refused.status_code, refused.text[:300])
    forge_root = base.removesuffix("/_playground/")
    old_token = {"Authorization": "token demo-bot-token-not-a-secret"}
    assert httpx.get(forge_root + "/repos/demo/hello-world/issues", headers=old_token, timeout=10).status_code == 401

    assert playground.key, "the printed URL carries the secret"
    page = httpx.get(playground.urls["forge"], timeout=10)
    assert page.status_code == 200 and "Open an issue" in page.text
    with httpx.Client(base_url=base, cookies=page.cookies, timeout=10) as browser:  # the cookie the page set
        created = browser.post("issues", json={"title": "Mine"})
        assert created.status_code == 201, created.text
        assert [issue["title"] for issue in browser.get("issues").json()["issues"]] == ["Mine"]
    assert playground.interrupt() == 0, playground.output()


@pytest.mark.parametrize(
    ("args", "problem"),
    [(["--planning"], "needs a model that plans: add --llm"), (["--llm", "--config", "missing.yaml"], "missing.yaml")],
)
def test_what_the_playground_cannot_do_is_refused_naming_why(tmp_path: Path, args: list[str], problem: str) -> None:
    result = subprocess.run(
        [sys.executable, "-m", "coding_agent.cli", "demo", "--serve", *args],
        cwd=tmp_path, capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert result.returncode == 2, result.stdout + result.stderr
    assert problem in result.stdout + result.stderr


def test_without_bwrap_your_own_model_is_refused_and_the_replay_model_says_so_first(tmp_path: Path) -> None:
    """The replay model runs only its scripted steps, so without bubblewrap it may run
    unsandboxed (saying so first); a model of yours runs what it likes: refused."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for program in ("git", "python3", "sh"):
        (bin_dir / program).symlink_to(shutil.which(program) or program)
    env = {**os.environ, "PATH": str(bin_dir)}
    config = tmp_path / "config.yaml"
    config.write_text("task_source: github\ngithub: {owner: acme, token: t-4c1d}\nllm: {provider: ollama, ollama: {model: m}}\n")
    refused = subprocess.run(
        [sys.executable, "-m", "coding_agent.cli", "demo", "--serve", "--llm", "--config", str(config)],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert refused.returncode == 2 and "needs bubblewrap (bwrap)" in refused.stderr, refused.stdout + refused.stderr
    playground = Playground(tmp_path, env=env)
    try:
        first = playground.stdout.read_text().splitlines()[0]
        assert "security.sandbox: none" in first and "bwrap" in first
        assert playground.interrupt() == 0, playground.output()
    finally:
        playground.kill()


def test_the_playground_as_a_github_app_works_a_labelled_issue_as_the_apps_bot(tmp_path: Path) -> None:
    """`demo --serve --app`: the agent runs as a GitHub App (installation tokens, no owner
    configured: every installation's repositories); an issue labelled on the page is worked
    and answered by `coding-agent-demo[bot]`."""
    playground = Playground(tmp_path, "--app")
    try:
        with httpx.Client(base_url=playground.api, params={"key": playground.key}, timeout=10) as api:
            created = api.post("issues", json={"title": "Add a kite", "body": "A blue one."})
            assert created.status_code == 201, created.text
            number = created.json()["number"]
            labelled = api.post(f"issues/{number}/label", json={})
            assert labelled.status_code == 200, labelled.text
            wait_for(lambda: playground.state_of(number) == "done", timeout=180, what=f"#{number} done as the app")
            [issue] = [i for i in api.get("issues").json()["issues"] if i["number"] == number]
        authors = {comment["author"] for comment in issue["comments"]}
        assert authors == {"coding-agent-demo[bot]"}, issue
        assert "coding agent done" in issue["labels"]
        assert playground.interrupt() == 0, playground.output()
    finally:
        playground.kill()

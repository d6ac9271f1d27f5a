"""`coding-agent github-app manifest` and `convert` (SPEC 17 onboarding), against the
sandbox GitHub's manifest conversion: the manifest asks for what the agent uses, the
local page posts it with a state the callback must match, and `convert` writes the key
and the webhook secret readable only by the agent's user and prints config that works."""

from __future__ import annotations

import asyncio
import json
import re
import stat
import subprocess
import sys
from pathlib import Path

import httpx
import yaml

from coding_agent.config import parse_config
from coding_agent.sandbox.github import GitHubSandbox
from coding_agent.sources.github.app_auth import AppTokens

PERMISSIONS = {
    "contents": "write",
    "issues": "write",
    "pull_requests": "write",
    "checks": "read",
    "statuses": "read",
    "actions": "read",
    "metadata": "read",
}


def _cli(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "coding_agent.cli", "github-app", *args], cwd=cwd, capture_output=True, text=True, timeout=60
    )


def test_the_manifest_asks_for_what_the_agent_uses(tmp_path: Path) -> None:
    result = _cli("manifest", "--no-page", "--public-url", "https://agent.example.com", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    manifest = json.loads(result.stdout)
    assert manifest["default_permissions"] == PERMISSIONS
    assert set(manifest["default_events"]) == {
        "issues", "issue_comment", "pull_request", "pull_request_review", "pull_request_review_comment",
        "check_run", "check_suite", "workflow_run", "status",
    }
    assert manifest["hook_attributes"] == {"url": "https://agent.example.com/webhooks/github", "active": True}


def test_the_page_posts_the_manifest_and_the_callback_needs_its_state(tmp_path: Path) -> None:
    process = subprocess.Popen(
        [sys.executable, "-m", "coding_agent.cli", "github-app", "manifest", "--owner", "acme", "--api-url", "http://127.0.0.1:1"],
        cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )
    try:
        assert process.stderr is not None
        line = ""
        for _ in range(50):  # the manifest is on stdout; the page's address is the first stderr line
            line = process.stderr.readline()
            if "Open http" in line or not line:
                break
        local = re.search(r"(http://127\.0\.0\.1:\d+)/", line).group(1)  # type: ignore[union-attr]
        page = httpx.get(local + "/").text
        action = re.search(r'action="([^"]+)"', page).group(1)  # type: ignore[union-attr]
        assert action.startswith("https://github.com/organizations/acme/settings/apps/new?state=")
        state = action.split("state=", 1)[1]
        assert httpx.get(f"{local}/callback", params={"code": "abc", "state": "forged"}).status_code == 400
        assert httpx.get(f"{local}/callback", params={"code": "c0de", "state": state}).status_code == 200
        out, _ = process.communicate(timeout=30)
    finally:
        process.kill()
    assert process.returncode == 1
    assert "to try again: coding-agent github-app convert c0de" in out, "a conversion that failed says how to retry"


def test_the_page_converts_the_code_github_sends_back(tmp_path: Path) -> None:
    """GitHub's redirect to the page carries the code: the page converts it itself, as
    `convert` does (files 0600, config printed), no second command needed."""
    with GitHubSandbox() as github:
        process = subprocess.Popen(
            [sys.executable, "-m", "coding_agent.cli", "github-app", "manifest", "--dir", str(tmp_path / "keys"), "--api-url", github.url],
            cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        )
        try:
            assert process.stderr is not None
            line = ""
            for _ in range(50):
                line = process.stderr.readline()
                if "Open http" in line or not line:
                    break
            local = re.search(r"(http://127\.0\.0\.1:\d+)/", line).group(1)  # type: ignore[union-attr]
            action = re.search(r'action="([^"]+)"', httpx.get(local + "/").text).group(1)  # type: ignore[union-attr]
            state = action.split("state=", 1)[1]
            code = github.state.approve_manifest({"name": "Acme Agent", "default_permissions": PERMISSIONS}, owner="acme")
            assert httpx.get(f"{local}/callback", params={"code": code, "state": state}).status_code == 200
            out, err = process.communicate(timeout=30)
        finally:
            process.kill()
        assert process.returncode == 0, err
        [app] = github.state.apps()
        assert f"app_id: {app.id}" in out and "@acme-agent[bot]" in out
        written = sorted((tmp_path / "keys").iterdir())
        assert [p.name for p in written] == ["acme-agent.private-key.pem", "acme-agent.webhook-secret"]
        assert all(stat.S_IMODE(p.stat().st_mode) == 0o600 for p in written)
        assert "PRIVATE KEY" not in out + err


def test_convert_writes_private_files_and_prints_config_that_works(tmp_path: Path) -> None:
    with GitHubSandbox() as github:
        code = github.state.approve_manifest({"name": "Acme Agent", "default_permissions": PERMISSIONS}, owner="acme")
        result = _cli("convert", code, "--dir", str(tmp_path / "keys"), "--api-url", github.url, cwd=tmp_path)
        assert result.returncode == 0, result.stderr
        [app] = github.state.apps()
        assert app.slug == "acme-agent" and "@acme-agent[bot]" in result.stdout
        written = sorted((tmp_path / "keys").iterdir())
        assert [p.name for p in written] == ["acme-agent.private-key.pem", "acme-agent.webhook-secret"]
        for path in written:
            assert stat.S_IMODE(path.stat().st_mode) == 0o600, path
        config_text = result.stdout.split("add to config.yaml:", 1)[1]
        data = yaml.safe_load(config_text)
        data["github"]["api_url"] = github.url
        config = parse_config({**data, "task_source": "github", "llm": {"provider": "ollama", "ollama": {"model": "m"}}},
                              env={"GITHUB_WEBHOOK_SECRET": (tmp_path / "keys" / "acme-agent.webhook-secret").read_text()})
        assert config.github is not None and config.github.app is not None
        assert config.github.app.app_id == app.id
        tokens = AppTokens(config.github.app, github.url, "acme", timeout=10)

        async def slug() -> str:
            try:
                return await tokens.slug()
            finally:
                await tokens.aclose()

        assert asyncio.run(slug()) == "acme-agent", "the written key signs JWTs the forge accepts"
        again = _cli("convert", code, "--dir", str(tmp_path / "again"), "--api-url", github.url, cwd=tmp_path)
        assert again.returncode == 1 and "HTTP 404" in again.stderr, "a code is good once"
    assert "PRIVATE KEY" not in result.stdout + result.stderr

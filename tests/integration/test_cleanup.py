"""Retention (SPEC 9.3): completed contexts past `cleanup_days` go, by `Cleanup` and the CLI."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import yaml

from coding_agent.config import parse_config
from coding_agent.domain.tasks import TaskKey
from coding_agent.runtime.cleanup import Cleanup
from coding_agent.runtime.memory_store import MemoryStore
from coding_agent.runtime.state_store import StateStore

DAY = 86400.0


def _config_data(tmp_path: Path) -> dict:  # type: ignore[type-arg]
    return {
        "task_source": "github",
        "github": {"owner": "acme", "api_url": "http://127.0.0.1:9", "token": "t"},
        "llm": {"provider": "openai", "openai": {"model": "m", "base_url": "http://127.0.0.1:9/v1", "api_key": "k"}},
        "context_storage": {"base_dir": str(tmp_path / "contexts"), "cleanup_days": 30},
        "database": {"url": f"sqlite:///{tmp_path / 'state.db'}"},
        "logging": {"dir": str(tmp_path / "logs")},
    }


def _context(root: Path, state: str, name: str, updated_at: float | None) -> Path:
    directory = root / "contexts" / state / name
    directory.mkdir(parents=True)
    (directory / "messages.jsonl").write_text("{}\n")
    if updated_at is not None:
        (directory / "metadata.json").write_text(json.dumps({"uuid": name, "updated_at": updated_at}))
    return directory


def test_old_completed_contexts_and_thread_memories_are_removed(tmp_path: Path) -> None:
    now = time.time()
    old = _context(tmp_path, "completed", "old", now - 31 * DAY)
    recent = _context(tmp_path, "completed", "recent", now - 29 * DAY)
    old_without_metadata = _context(tmp_path, "completed", "bare", None)
    os.utime(old_without_metadata, (now - 40 * DAY, now - 40 * DAY))
    running = _context(tmp_path, "running", "busy", now - 90 * DAY)
    config = parse_config(_config_data(tmp_path), env={})
    store = StateStore(config.database.url)
    try:
        key = TaskKey.parse("github:acme/widgets#1")
        MemoryStore(store.engine, clock=lambda: now - 31 * DAY).add_thread_memory(key, "r-old", "old summary")
        MemoryStore(store.engine).add_thread_memory(key, "r-new", "new summary")
        clock = [now]
        cleanup = Cleanup(config, store, clock=lambda: clock[0], every_seconds=DAY)

        report = cleanup.maybe_run()
        assert report is not None and (report.contexts_removed, report.thread_memories_removed) == (2, 1)
        assert not old.exists() and not old_without_metadata.exists()
        assert recent.exists() and running.exists(), "recent and unfinished contexts stay"
        assert [t.summary for t in MemoryStore(store.engine).thread_memories()] == ["new summary"]

        assert cleanup.maybe_run() is None, "serve runs it at most once a day"
        clock[0] += DAY
        assert cleanup.maybe_run() is not None
    finally:
        store.close()


def test_cleanup_command(tmp_path: Path) -> None:
    _context(tmp_path, "completed", "old", time.time() - 31 * DAY)
    (tmp_path / "config.yaml").write_text(yaml.safe_dump(_config_data(tmp_path)))
    result = subprocess.run(
        [sys.executable, "-m", "coding_agent.cli", "cleanup", "--config", str(tmp_path / "config.yaml")],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 0, result.stderr
    assert "removed 1 completed context(s)" in result.stdout and "older than 30 day(s)" in result.stdout
    assert not (tmp_path / "contexts" / "completed" / "old").exists()

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
from coding_agent.store.memories import MemoryStore
from coding_agent.store.state import StateStore

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
    assert "0 ended run(s)' clone(s)" in result.stdout
    assert not (tmp_path / "contexts" / "completed" / "old").exists()


def _clone(root: Path, run_uuid: str) -> tuple[Path, Path]:
    """A run's clone as a worker leaves it: the workspace and its git directory beside it."""
    workspace = root / "workspaces" / run_uuid
    git_dir = root / "workspaces.git-dirs" / run_uuid
    for directory in (workspace, git_dir):
        directory.mkdir(parents=True)
        (directory / "file").write_text("x")
    return workspace, git_dir


def test_clones_of_runs_that_ended_elsewhere_are_swept(tmp_path: Path) -> None:
    """A run paused here keeps its clone; resumed and ended on another machine, the clone
    left here goes at the next cleanup. Running, paused and unknown runs' clones stay, and
    a link in the workspaces directory is never followed."""
    data = {**_config_data(tmp_path), "workspace": {"base_dir": str(tmp_path / "workspaces")}}
    config = parse_config(data, env={})
    store = StateStore(config.database.url)
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "precious").write_text("keep me")
    try:
        statuses = {"r-done": "done", "r-failed": "failed", "r-stopped": "stopped", "r-abandoned": "abandoned"}
        statuses |= {"r-paused": "paused", "r-running": "running"}
        for run_uuid, status in statuses.items():
            store.runs.start_run(run_uuid, f"github:acme/widgets#{len(run_uuid)}", "machine-b", "maintainer")
            if status != "running":
                store.runs.finish_run(run_uuid, status, 3)
        clones = {run_uuid: _clone(tmp_path, run_uuid) for run_uuid in [*statuses, "r-unknown"]}
        # Only a git directory is left of one ended run (its workspace was removed by hand).
        orphan_git_dir = tmp_path / "workspaces.git-dirs" / "r-orphan"
        orphan_git_dir.mkdir()
        store.runs.start_run("r-orphan", "github:acme/widgets#9", "machine-b", None)
        store.runs.finish_run("r-orphan", "done", 1)
        # A hostile link named like an ended run must not lead the sweep outside.
        store.runs.start_run("r-link", "github:acme/widgets#10", "machine-b", None)
        store.runs.finish_run("r-link", "failed", 1)
        (tmp_path / "workspaces" / "r-link").symlink_to(outside, target_is_directory=True)

        report = Cleanup(config, store).run()

        ended = {"r-done", "r-failed", "r-stopped", "r-abandoned"}
        for run_uuid, (workspace, git_dir) in clones.items():
            gone = run_uuid in ended
            assert workspace.exists() is not gone and git_dir.exists() is not gone, run_uuid
        assert not orphan_git_dir.exists()
        assert (outside / "precious").read_text() == "keep me", "the link's target is untouched"
        assert report.clones_removed == len(ended) + 1
    finally:
        store.close()


def test_keep_finished_keeps_every_clone(tmp_path: Path) -> None:
    data = {**_config_data(tmp_path), "workspace": {"base_dir": str(tmp_path / "workspaces"), "keep_finished": True}}
    config = parse_config(data, env={})
    store = StateStore(config.database.url)
    try:
        store.runs.start_run("r-done", "github:acme/widgets#1", "machine-b", None)
        store.runs.finish_run("r-done", "done", 3)
        workspace, git_dir = _clone(tmp_path, "r-done")
        assert Cleanup(config, store).run().clones_removed == 0
        assert workspace.exists() and git_dir.exists()
    finally:
        store.close()

"""`coding-agent doctor`'s wall time as an operator sees it (issue 14: under 15 s).

The command runs as a user runs it (a new `coding-agent` process each time) against a
deployment of both sandbox forges (GitHub and GitLab, each with a listed repository
whose role it checks), the replay model's model listing (OpenAI provider), the built-in
workspace MCP server plus the npm `mcp-server-filesystem` when it is on PATH, bwrap, and
the SQLite store; with `--distributed`, PostgreSQL and RabbitMQ on this machine too
(skipped with a note when they are not reachable). Every check must pass, so the figure
is the good path's, which runs every check to its end.

Run: `python benchmarks/bench_doctor.py [--runs 5] [--distributed]`
"""

from __future__ import annotations

import argparse
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import yaml
from _common import emit, seed_github, seed_gitlab

from coding_agent.sandbox.github import GitHubSandbox
from coding_agent.sandbox.replay_model import ReplaySandbox
from tests.support.gitlab import GitLabSandbox
from tests.support.services import amqp_url, postgres_admin_url, reachable

BOT = "bench-bot"
GITHUB_TOKEN = "ghp_" + "BenchDoctorToken0123456789abcdefABCD"
GITLAB_TOKEN = "glpat-" + "BenchDoctorToken0123"
TARGET_SECONDS = 15.0


def _config(directory: Path, github: GitHubSandbox, gitlab: GitLabSandbox, model: ReplaySandbox, distributed: bool) -> Path:
    servers: list[dict[str, Any]] = []  # beside the built-in workspace server the config adds
    filesystem = shutil.which("mcp-server-filesystem")
    if filesystem:
        servers.append({"mcp_server_name": "files", "command": [filesystem, str(directory)]})
    data: dict[str, Any] = {
        "task_source": ["github", "gitlab"],
        "github": {"api_url": github.url, "token": GITHUB_TOKEN, "owner": "bench", "repos": ["doctor"], "bot_name": BOT},
        "gitlab": {"api_url": gitlab.url, "token": GITLAB_TOKEN, "group": "bench", "bot_name": BOT},
        "llm": {"provider": "openai", "openai": {"base_url": model.openai_base_url, "api_key": "bench-key", "model": "replay-model"}},
        "mcp_servers": servers,
        "workspace": {"base_dir": str(directory / "workspaces")},
        "context_storage": {"base_dir": str(directory / "contexts")},
        "logging": {"dir": str(directory / "logs")},
        "database": {"url": f"sqlite:///{directory / 'state.db'}"},
    }
    if distributed:
        data["database"] = {"url": postgres_admin_url()}
        data["queue"] = {"backend": "rabbitmq", "url": amqp_url(), "name": "bench-doctor"}
    path = directory / "config.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


def _doctor(config_path: Path, model: ReplaySandbox) -> tuple[float, float, str]:
    """One `coding-agent doctor`: wall seconds, CPU seconds of the process, its output."""
    model.model.reset()
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    started = time.perf_counter()
    completed = subprocess.run(
        [sys.executable, "-m", "coding_agent.cli", "doctor", "--config", str(config_path)],
        capture_output=True,
        text=True,
        timeout=120,
        # As an operator's shell runs it: byte-code caches used (some images turn them off).
        env={name: value for name, value in os.environ.items() if name != "PYTHONDONTWRITEBYTECODE"},
    )
    wall = time.perf_counter() - started
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    if completed.returncode != 0:
        raise SystemExit(f"doctor failed (exit {completed.returncode}):\n{completed.stdout}{completed.stderr}")
    return wall, cpu, completed.stdout


def main(runs: int, distributed: bool) -> dict[str, Any]:
    if distributed and not (reachable(postgres_admin_url()) and reachable(amqp_url())):
        return {"benchmark": "doctor", "skipped": "PostgreSQL or RabbitMQ is not reachable on this machine"}
    with tempfile.TemporaryDirectory(prefix="bench-doctor-") as scratch:
        # The model answers doctor's probe with the structured tool call it asks for; each
        # doctor run is the same conversation, so the script starts afresh for each.
        probe_answer = {"replies": [{"tool": "doctor/echo", "args": {"text": "ping"}}]}
        with GitHubSandbox() as github, GitLabSandbox() as gitlab, ReplaySandbox(probe_answer) as model:
            seed_github(github.state, ["bench/doctor"], "maintainer", BOT, GITHUB_TOKEN)
            seed_gitlab(gitlab.state, ["bench/doctor"], "maintainer", BOT, GITLAB_TOKEN)
            config_path = _config(Path(scratch), github, gitlab, model, distributed)
            _doctor(config_path, model)  # the first run writes the byte-code caches; not counted
            results = [_doctor(config_path, model) for _ in range(runs)]
    walls = [wall for wall, _, _ in results]
    checks = [line.split()[1] if len(line.split()) > 1 else line for line in results[-1][2].splitlines() if line.strip()]
    median = statistics.median(walls)
    return {
        "benchmark": "doctor",
        "distributed": distributed,
        "checks": len(checks),
        "runs": runs,
        "wall_s": {"median": round(median, 3), "max": round(max(walls), 3)},
        "cpu_s_median": round(statistics.median(cpu for _, cpu, _ in results), 3),
        "target_s": TARGET_SECONDS,
        "met": median < TARGET_SECONDS,
        "output": results[-1][2].splitlines(),
    }


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--distributed", action="store_true")
    options = parser.parse_args()
    emit(main(options.runs, options.distributed))

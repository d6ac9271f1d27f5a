"""Two `run --once` processes started together on the same tasks: each task worked once."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from coding_agent.sandbox.replay_model import ReplaySandbox

from tests.support.state import agent_store

from .conftest import HELLO_SCRIPT, GitHubForge, llm_section, secret_env, write_config


def test_two_processes_work_each_task_exactly_once(github_forge: GitHubForge, tmp_path: Path) -> None:
    numbers = [github_forge.open_task("issue", f"Task {n}", f"Please add hello.txt ({n}).") for n in range(6)]
    script = {**HELLO_SCRIPT, "latency_seconds": 0.05}
    with ReplaySandbox(script) as model:
        setup = write_config(tmp_path, [github_forge], llm_section(model))
        env = {**os.environ, **secret_env()}
        command = [sys.executable, "-m", "coding_agent.cli", "run", "--once", "--config", str(setup.config_path)]
        processes = [
            subprocess.Popen(command, cwd=tmp_path, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
            for _ in range(2)
        ]
        outputs = [process.communicate(timeout=300) for process in processes]
        conversations = {request.conversation for request in model.requests}

    assert [process.returncode for process in processes] == [0, 0], outputs
    for number in numbers:
        labels = github_forge.labels("issue", number)
        assert "coding agent done" in labels and "coding agent processing" not in labels, (number, labels)
        finals = [body for _, body in github_forge.comments("issue", number) if body.startswith("Wrote hello.txt with a greeting.")]
        assert len(finals) == 1, f"issue #{number} got {len(finals)} final comments"
    with agent_store(tmp_path) as store:
        runs = store.runs.all()
    assert sorted(run.task_key for run in runs) == sorted(f"github:acme/widgets#{n}" for n in numbers)
    assert len(conversations) == len(numbers), "one model conversation per task"
    assert all(run.prompt_tokens > 0 and run.completion_tokens > 0 for run in runs), "token usage is recorded per run"

"""`coding-agent run --once` through the CLI, on GitHub and GitLab issues, PRs and MRs."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from coding_agent.sandbox.replay_model import ReplaySandbox

from ._forge_git import branch_file, task_branch
from .conftest import (
    ForgeUnderTest,
    Kind,
    llm_section,
    progress_comments,
    run_cli,
    write_config,
)


def _read_jsonl(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


@pytest.mark.parametrize("kind", ["issue", "change"])
def test_labelled_task_ends_done(forge: ForgeUnderTest, kind: Kind, replay: ReplaySandbox, tmp_path: Path) -> None:
    number = forge.open_task(kind, "Add a greeting file", "Please add hello.txt with a greeting.")
    setup = write_config(tmp_path, [forge], llm_section(replay))

    result = run_cli(setup, "run", "--once")

    assert result.returncode == 0, result.stderr
    labels = forge.labels(kind, number)
    assert "coding agent done" in labels
    assert "coding agent" not in labels and "coding agent processing" not in labels
    bodies = [body for _, body in forge.comments(kind, number)]
    [progress] = progress_comments(bodies)
    assert "Writing hello.txt now." in progress, "the step's comment is folded into the progress comment"
    assert "✅ done" in progress, "the progress comment ends in the final state"
    assert bodies[-1].startswith("Wrote hello.txt with a greeting."), "the done comment is the final comment"

    [run_dir] = setup.completed_runs()
    messages = _read_jsonl(run_dir / "messages.jsonl")
    tools = _read_jsonl(run_dir / "tools.jsonl")
    assert messages[0]["role"] == "system" and messages[1]["role"] == "user"
    assert [t["tool"] for t in tools] == ["workspace/create"] and not tools[0]["is_error"]
    metadata = json.loads((run_dir / "metadata.json").read_text())
    assert metadata["status"] == "done" and metadata["task_key"].startswith(f"{forge.name}:acme/widgets")
    branch = task_branch(forge, number) if kind == "issue" else "feature"
    written = branch_file(forge, branch, "hello.txt")
    assert written == "hello from the agent\n", "the tool call really wrote the file"
    assert not (setup.contexts / "running").exists() or not any((setup.contexts / "running").iterdir())
    assert not any(setup.workspaces.iterdir()), "the run's clone is deleted when it ends"
    assert not any(Path(f"{setup.workspaces}.git-dirs").iterdir()), "and its git directory beside it"


def test_keep_finished_keeps_the_clone(github_forge: ForgeUnderTest, replay: ReplaySandbox, tmp_path: Path) -> None:
    github_forge.open_task("issue", "Add a greeting file", "Please add hello.txt with a greeting.")
    setup = write_config(tmp_path, [github_forge], llm_section(replay), workspace={
        "base_dir": str(tmp_path / "workspaces"), "keep_finished": True
    })

    assert run_cli(setup, "run", "--once").returncode == 0

    [workspace] = list(setup.workspaces.iterdir())
    assert (workspace / "hello.txt").read_text() == "hello from the agent\n"
    assert (Path(f"{setup.workspaces}.git-dirs") / workspace.name / "HEAD").is_file()


def test_second_run_finds_nothing_to_do(github_forge: ForgeUnderTest, replay: ReplaySandbox, tmp_path: Path) -> None:
    number = github_forge.open_task("issue", "Once only", "Do it once.")
    setup = write_config(tmp_path, [github_forge], llm_section(replay))
    assert run_cli(setup, "run", "--once").returncode == 0
    requests_after_first = len(replay.requests)

    second = run_cli(setup, "run", "--once")

    assert second.returncode == 0
    assert len(replay.requests) == requests_after_first, "a done task is not worked again"
    assert len(setup.completed_runs()) == 1
    assert github_forge.labels("issue", number).count("coding agent done") == 1

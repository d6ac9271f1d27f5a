"""Config errors (SPEC 11, issue 11 item 15): exit 2 with one line naming the key or the
file, never a traceback, never minutes of work.

Each case writes a broken config and runs the CLI as a user would.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from coding_agent.sandbox.replay_model import ReplaySandbox

from .conftest import GitHubForge, llm_section, secret_env, write_config

LABEL_KEYS = ("bot_label", "processing_label", "done_label", "paused_label", "stopped_label", "failed_label")
# The "billion laughs" document: nine levels of nine aliases expand to 9**9 strings.
ALIAS_BOMB = "a: &a [lol,lol,lol,lol,lol,lol,lol,lol,lol]\n" + "".join(
    f"{chr(98 + i)}: &{chr(98 + i)} [{','.join(['*' + chr(97 + i)] * 9)}]\n" for i in range(8)
)


def _cli(config: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, **secret_env()}
    return subprocess.run(
        [sys.executable, "-m", "coding_agent.cli", *args, "--config", str(config)],
        cwd=config.parent,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,  # a guard against hanging, not a speed assertion
    )


def _assert_one_line_exit_2(result: subprocess.CompletedProcess[str], *names: str) -> None:
    assert result.returncode == 2, (result.returncode, result.stderr)
    assert "Traceback" not in result.stderr
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert len(lines) == 1, result.stderr
    for name in names:
        assert name in lines[0], lines[0]


def _valid_config(tmp_path: Path, forge: GitHubForge, model: ReplaySandbox, **extra: object) -> Path:
    return write_config(tmp_path, [forge], llm_section(model), **extra).config_path


def test_non_utf8_config_file(tmp_path: Path) -> None:
    path = tmp_path / "config.yaml"
    path.write_bytes(b"task_source: [github]\npersona: \"caf\xe9 \xff\"\n")
    _assert_one_line_exit_2(_cli(path, "status"), str(path), "UTF-8")


def test_yaml_alias_bomb_fails_fast(tmp_path: Path) -> None:
    path = tmp_path / "config.yaml"
    path.write_text(ALIAS_BOMB)
    _assert_one_line_exit_2(_cli(path, "status"), str(path), "alias")


@pytest.mark.parametrize("url", ["not a url", "nosuchdb://x/y", "postgresql://host:notaport/db", "sqlite://"])
def test_invalid_database_url(github_forge: GitHubForge, replay: ReplaySandbox, url: str, tmp_path: Path) -> None:
    path = _valid_config(tmp_path, github_forge, replay, database={"url": url})
    _assert_one_line_exit_2(_cli(path, "status"), "database.url")


@pytest.mark.parametrize("key", LABEL_KEYS)
@pytest.mark.parametrize("value", ["", "   "])
def test_empty_labels_are_rejected(
    github_forge: GitHubForge, replay: ReplaySandbox, key: str, value: str, tmp_path: Path
) -> None:
    path = _valid_config(tmp_path, github_forge, replay)
    data = yaml.safe_load(path.read_text())
    data["github"][key] = value
    path.write_text(yaml.safe_dump(data))
    _assert_one_line_exit_2(_cli(path, "status"), f"github.{key}")


def test_two_states_under_one_label_are_rejected(
    github_forge: GitHubForge, replay: ReplaySandbox, tmp_path: Path
) -> None:
    path = _valid_config(tmp_path, github_forge, replay)
    data = yaml.safe_load(path.read_text())
    data["github"]["failed_label"] = "Coding Agent Done"
    path.write_text(yaml.safe_dump(data))
    _assert_one_line_exit_2(_cli(path, "status"), "github", "failed_label", "done_label")

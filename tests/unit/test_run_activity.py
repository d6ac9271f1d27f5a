"""The dashboard's reader of runs' context directories: what it keeps parsed is bounded,
and a file that changed is read afresh."""

from __future__ import annotations

import json
from pathlib import Path

from coding_agent.redaction import Redactor
from coding_agent.web.activity import PARSED_FILES, RunActivity


def _run(base: Path, name: str, tools: list[str]) -> Path:
    directory = base / "done" / name
    directory.mkdir(parents=True, exist_ok=True)
    records = [{"at": 0, "tool": tool, "args": {}, "is_error": False, "result": "ok"} for tool in tools]
    (directory / "tools.jsonl").write_text("".join(json.dumps(record) + "\n" for record in records))
    return directory


def test_the_parsed_files_kept_stay_within_the_cap_over_many_runs(tmp_path: Path) -> None:
    activity = RunActivity(tmp_path, Redactor([]), 10)
    for index in range(4 * PARSED_FILES):
        directory = _run(tmp_path, f"run-{index}", [f"workspace/tool{index}"])
        assert [call["tool"] for call in activity.tool_calls(directory)] == [f"workspace/tool{index}"]
        assert len(activity._cache) <= PARSED_FILES


def test_a_file_that_changed_is_read_again(tmp_path: Path) -> None:
    activity = RunActivity(tmp_path, Redactor([]), 10)
    directory = _run(tmp_path, "run-1", ["workspace/view"])
    assert [call["tool"] for call in activity.tool_calls(directory)] == ["workspace/view"]
    _run(tmp_path, "run-1", ["workspace/view", "workspace/create"])
    assert [call["tool"] for call in activity.tool_calls(directory)] == ["workspace/view", "workspace/create"]

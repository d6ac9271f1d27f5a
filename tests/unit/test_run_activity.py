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


def test_comments_seen_are_the_runs_records_each_comment_once(tmp_path: Path) -> None:
    """The records `RunContextFiles.record_comments` writes, read back by the page: the
    bot's own marked as posted, a comment read again after a crash shown once, and no
    prompt text needed at all (the run's messages.jsonl is empty)."""
    from coding_agent.context.storage import CommentRead, ContextStorage

    files = ContextStorage(tmp_path, Redactor([])).start_run("run-1")
    files.record_comments([CommentRead("1", "agent-bot", "2026-03-01T09:00:00+00:00", "Answered.", own=True)], "first_turn")
    files.record_comments([CommentRead("2", "rita", "2026-03-01T09:01:00+00:00", "  Please add tests.\n")], "new_comments")
    files.record_comments([CommentRead("2", "rita", "2026-03-01T09:01:00+00:00", "  Please add tests.\n")], "new_comments")
    files.close()

    comments = RunActivity(tmp_path, Redactor([]), 10).of_run("run-1", None, None)["comments"]

    assert [(c["author"], c["at"], c["body"], c["posted"]) for c in comments] == [
        ("agent-bot", "2026-03-01T09:00:00+00:00", "Answered.", True),
        ("rita", "2026-03-01T09:01:00+00:00", "Please add tests.", False),
    ]

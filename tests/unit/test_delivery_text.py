"""The words delivery writes: commit messages, PR/MR descriptions, the final comment's note."""

from __future__ import annotations

from datetime import datetime, timezone

from coding_agent.domain.delivery import ChangeRequest, GitIdentity
from coding_agent.domain.tasks import Task, TaskKey
from coding_agent.workspace.delivery import SUMMARY_END, SUMMARY_START, Delivery, change_body, commit_message, delivery_note

T0 = datetime(2025, 1, 1, tzinfo=timezone.utc)
TASK = Task(TaskKey.parse("github:acme/app#7"), "Fix the parser", "", "alice", (), (), "", T0, T0)
ALICE = GitIdentity("Alice Liddell", "alice@example.test")


def test_commit_subject_is_the_summary_first_line_without_markdown() -> None:
    message = commit_message(TASK, "## Fixed the parser\n\nIt now accepts tabs.", ALICE)
    assert message == "Fixed the parser\n\nIt now accepts tabs.\n\nCo-authored-by: Alice Liddell <alice@example.test>\n"


def test_a_long_first_line_is_cut_and_kept_whole_in_the_body() -> None:
    summary = "Rewrote " + "the tokenizer and " * 10 + "the parser."
    subject, _, body = commit_message(TASK, summary, None).partition("\n\n")
    assert len(subject) <= 72 and subject.endswith("...")
    assert body.strip() == summary


def test_an_empty_summary_names_the_task() -> None:
    assert commit_message(TASK, "  ", None) == "Work on github:acme/app#7: Fix the parser\n"


def test_identity_rejects_what_would_break_a_trailer() -> None:
    for name, email in (("", "a@b"), ("Eve <x>", "e@x"), ("Eve", "e@x\nCo-authored-by: Mallory <m@x>")):
        try:
            GitIdentity(name, email)
        except ValueError:
            continue
        raise AssertionError(f"{name!r} <{email!r}> was accepted")
    assert str(GitIdentity.from_profile("Eve <admin>\n", " eve@x.test\n", "eve")) == "Eve admin <eve@x.test>"
    assert GitIdentity.from_profile("<>", "e@x", "eve").name == "eve"


def test_change_body_closes_the_issue_and_updates_only_its_section() -> None:
    first = change_body(TASK, "First summary", "alice", "run-1")
    assert first.startswith("Closes #7\n\n" + SUMMARY_START) and "@alice" in first and "run-1" in first
    edited = "Reviewer: looks promising\n\n" + first
    second = change_body(TASK, "Second summary", "alice", "run-2", previous=edited)
    assert second.startswith("Reviewer: looks promising") and "Second summary" in second and "First summary" not in second
    without_markers = change_body(TASK, "Third", None, "run-3", previous="Hand-written description")
    assert without_markers == f"Hand-written description\n\n{SUMMARY_START}\nThird\n{SUMMARY_END}"


def test_delivery_notes_name_the_change_in_each_language() -> None:
    change = ChangeRequest(12, "https://example.test/pr/12", "coding-agent/7-fix", "main", "", True)
    opened = Delivery("opened", "coding-agent/7-fix", "0123456789abcdef", change)
    assert delivery_note(opened, "github", "en") == (
        "Opened draft pull request #12 from `coding-agent/7-fix`: https://example.test/pr/12"
    )
    assert "!12" in delivery_note(opened, "gitlab", "en") and "merge request" in delivery_note(opened, "gitlab", "en")
    assert "プルリクエスト #12" in delivery_note(opened, "github", "ja")
    assert delivery_note(Delivery("pushed", "feature", "0123456789abcdef"), "github", "en") == (
        "Pushed `0123456789ab` to `feature`."
    )
    assert delivery_note(Delivery("none"), "gitlab", "ja") == ""

"""New-comment detection (seed 000): the message formats, what counts as new, the saved
state, and that a failing listing never fails the run. Against a sandbox GitHub."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

from coding_agent.agent.steering.comments import LOOK_BACK, CommentDetector, format_comment_message
from coding_agent.domain.tasks import Comment
from coding_agent.sandbox.faults import Fault

from ._steering_forge import BOT, REPO, forge

AT = datetime(2024, 12, 7, 9, 30, tzinfo=timezone.utc)


def _comment(number: int, author: str, body: str) -> Comment:
    return Comment(id=str(number), author=author, body=body, created_at=AT)


def test_one_comment_format() -> None:
    assert format_comment_message([_comment(1, "alice", "Use tabs.")]) == "[New Comment from @alice]:\nUse tabs."


def test_several_comments_format() -> None:
    message = format_comment_message([_comment(1, "alice", "Use tabs."), _comment(2, "bob", "And a README.")])
    assert message == (
        "[New Comments Detected]:\n"
        "Comment 1 from @alice (2024-12-07T09:30:00+00:00):\nUse tabs.\n\n"
        "Comment 2 from @bob (2024-12-07T09:30:00+00:00):\nAnd a README.\n"
    )


def test_no_comments_no_message() -> None:
    assert format_comment_message([]) == ""


async def test_only_new_comments_of_others_are_found() -> None:
    async with forge() as f:
        state = f.sandbox.state
        state.add_comment(REPO, f.number, "alice", "before the run")
        detector = CommentDetector(f.source, f.key, BOT, enabled=True)
        detector.initialize(await f.source.list_comments(f.key))
        assert await detector.check() == []
        state.add_comment(REPO, f.number, BOT, "the bot's own progress")
        state.add_comment(REPO, f.number, "alice", "new one")
        found = await detector.check()
        assert [(c.author, c.body) for c in found] == [("alice", "new one")]
        assert await detector.check() == [], "found once"


async def test_a_look_asks_only_for_recent_comments_and_finds_a_late_one_once() -> None:
    # A comment stamped a moment before one already seen can become visible after it
    # (two writes at once, a read replica behind): the look reaches back for it.
    now = [datetime(2025, 3, 1, 10, 0, tzinfo=timezone.utc)]
    async with forge(clock=lambda: now[0]) as f:
        state = f.sandbox.state
        state.add_comment(REPO, f.number, "alice", "long ago")
        now[0] += timedelta(hours=1)
        detector = CommentDetector(f.source, f.key, BOT, enabled=True)
        detector.initialize(await f.source.list_comments(f.key))
        state.add_comment(REPO, f.number, BOT, "the bot's step")
        assert await detector.check() == []
        now[0] -= LOOK_BACK / 2
        state.add_comment(REPO, f.number, "alice", "late")
        state.clear_requests()
        assert [c.body for c in await detector.check()] == ["late"]
        assert await detector.check() == [], "found once"
        listings = [r for r in state.requests() if r.path.endswith("/comments")]
        assert len(listings) == 2 and all("since=" in r.query for r in listings)
        assert detector.get_state()["newest_comment"] == "2025-03-01T11:00:00+00:00"


async def test_state_round_trip_and_bad_state() -> None:
    async with forge() as f:
        detector = CommentDetector(f.source, f.key, BOT, enabled=True)
        f.sandbox.state.add_comment(REPO, f.number, "alice", "known")
        await detector.initialize_from_forge()
        saved = detector.get_state()
        assert len(saved["last_comment_ids"]) == 1 and saved["last_check_timestamp"]

        restored = CommentDetector(f.source, f.key, BOT, enabled=True)
        assert restored.restore_state(saved)
        f.sandbox.state.add_comment(REPO, f.number, "alice", "posted while paused")
        assert [c.body for c in await restored.check()] == ["posted while paused"]

        broken = CommentDetector(f.source, f.key, BOT, enabled=True)
        assert not broken.restore_state({"last_comment_ids": None})
        assert not broken.restore_state("garbage")
        assert broken.last_comment_ids == set()


async def test_a_failing_listing_is_logged_and_returns_nothing() -> None:
    async with forge() as f:
        detector = CommentDetector(f.source, f.key, BOT, enabled=True)
        detector.initialize([])
        f.sandbox.state.add_comment(REPO, f.number, "alice", "seen later")
        f.sandbox.faults.add(Fault(pattern=r"/comments$", count=1, status=500))
        assert await detector.check() == []
        assert [c.body for c in await detector.check()] == ["seen later"], "found at the next check"


async def test_disabled_without_a_bot_name() -> None:
    async with forge(bot_name=None) as f:
        detector = CommentDetector(f.source, f.key, None, enabled=True)
        f.sandbox.state.add_comment(REPO, f.number, "alice", "never read")
        f.clear()
        assert not detector.enabled and await detector.check() == []
        assert f.sandbox.state.requests() == [], "a disabled detector asks the forge nothing"

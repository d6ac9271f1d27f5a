"""The progress comment (SPEC 8.4): one comment, edits throttled, the final state always
written. The clock and the timer's sleep are injected; the comment lives on a sandbox
GitHub, whose request log counts the edits."""

from __future__ import annotations

import asyncio

from coding_agent.agent.progress import ProgressComment
from coding_agent.redaction import Redactor

from ._steering_forge import REPO, forge


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


class HeldSleep:
    """A sleep that returns only when the test lets it, recording what was asked."""

    def __init__(self) -> None:
        self.asked: list[float] = []
        self.go = asyncio.Event()

    async def __call__(self, seconds: float) -> None:
        self.asked.append(seconds)
        await self.go.wait()


def _edits(f) -> int:  # type: ignore[no-untyped-def]
    return sum(1 for r in f.sandbox.state.requests() if r.method == "PATCH")


async def test_edits_are_throttled_and_the_final_state_is_written() -> None:
    clock, sleep = Clock(), HeldSleep()
    async with forge() as f:
        created: list[str] = []
        progress = ProgressComment(
            f.source, f.key, Redactor(), "en", "run-1", 5.0, on_created=created.append, clock=clock, sleep=sleep
        )
        await progress.start()
        assert created and len(f.sandbox.state.comments(REPO, f.number)) == 1

        for step in range(1, 4):  # three quick steps inside one interval
            clock.now += 0.5
            progress.note_steps(step)
            progress.note_step(f"step {step} comment")
            await progress.refresh()
        await asyncio.sleep(0)  # let the timer start
        assert _edits(f) == 0, "nothing written sooner than the interval"
        assert sleep.asked == [4.5], "one timer, for when the interval (from the post at 0) has passed"

        clock.now = 5.0
        sleep.go.set()
        assert progress._timer is not None
        await progress._timer  # the timer's edit
        assert _edits(f) == 1
        body = f.sandbox.state.comment(int(created[0])).body
        assert "step 3 comment" in body and "3 step(s)" in body, "the timer wrote the latest state"

        clock.now = 5.1
        progress.note_action("workspace/create", {"path": "a.txt", "content": "x" * 500}, is_error=False)
        await progress.finish("done")
        assert _edits(f) == 2, "the final state is written at once, whatever the throttle says"
        final = f.sandbox.state.comment(int(created[0])).body
        assert "✅ done" in final and "✓ `workspace/create` (path=a.txt" in final
        assert len(f.sandbox.state.comments(REPO, f.number)) == 1, "one comment, edited in place"


async def test_an_adopted_comment_is_edited_not_posted_again() -> None:
    async with forge() as f:
        first = ProgressComment(f.source, f.key, Redactor(), "ja", "run-1", 0)
        await first.start()
        saved = first.get_state()

        again = ProgressComment(f.source, f.key, Redactor(), "ja", "run-1", 0)
        again.restore_state(saved)
        await again.start()
        await again.finish("paused")
        [comment] = f.sandbox.state.comments(REPO, f.number)
        assert "⏸️ 一時停止中" in comment.body


async def test_the_models_words_are_redacted_then_shown_inert() -> None:
    secret = "p@ss[w]<rd>&x"  # a configured secret with the characters escaping changes
    async with forge() as f:
        progress = ProgressComment(f.source, f.key, Redactor([secret]), "en", "run-1", 0)
        await progress.start()
        progress.note_step(f"Using {secret} for @org/team <img src=x>")
        progress.note_action("run`x", {"command": f"echo {secret} [link](http://evil)"}, is_error=False)
        await progress.finish("done")
        [comment] = f.sandbox.state.comments(REPO, f.number)

    masked = "\\*\\*\\*"  # the redaction's *** as inert markdown: it still reads ***
    assert f"Using {masked} for @\u200dorg/team \\<img src=x>" in comment.body
    assert f"✓ `run'x` (command=echo {masked} \\[link\\](http\u200d://evil))" in comment.body
    assert "ss[w" not in comment.body and "ss\\[w" not in comment.body, "neither the secret nor its escaped form"

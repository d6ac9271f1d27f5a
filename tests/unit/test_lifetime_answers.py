"""`LifetimeAnswers` (sources/http.py): what holds for the process's life is asked once."""

from __future__ import annotations

import asyncio

import pytest

from coding_agent.sources.http import LifetimeAnswers


def test_askers_at_the_same_moment_share_one_request_and_a_failure_is_asked_again() -> None:
    asked: list[str] = []

    async def scenario() -> list[str]:
        answers: LifetimeAnswers[str] = LifetimeAnswers()
        release = asyncio.Event()

        async def ask() -> str:
            asked.append("url")
            await release.wait()
            return "https://forge/clone.git"

        waiting = [asyncio.create_task(answers.get("repo", ask)) for _ in range(5)]
        await asyncio.sleep(0)
        release.set()
        results = await asyncio.gather(*waiting)
        assert await answers.get("repo", ask) == "https://forge/clone.git"

        async def fail() -> str:
            asked.append("broken")
            raise RuntimeError("forge down")

        for _ in range(2):
            with pytest.raises(RuntimeError):
                await answers.get("other", fail)
        return results

    assert asyncio.run(asyncio.wait_for(scenario(), 30)) == ["https://forge/clone.git"] * 5
    assert asked == ["url", "broken", "broken"]


def test_a_known_answer_outlives_its_event_loop_and_a_pending_one_is_asked_again() -> None:
    answers: LifetimeAnswers[int] = LifetimeAnswers()
    calls: list[int] = []

    async def ask() -> int:
        calls.append(1)
        return len(calls)

    assert asyncio.run(answers.get("known", ask)) == 1
    assert asyncio.run(answers.get("known", ask)) == 1  # another loop: no second request

    async def hang() -> int:
        await asyncio.Event().wait()
        return 0

    async def start_and_leave() -> None:
        asyncio.get_running_loop().create_task(answers.get("pending", hang))
        await asyncio.sleep(0)

    asyncio.run(start_and_leave())  # the loop ends with the request unanswered
    assert asyncio.run(asyncio.wait_for(answers.get("pending", ask), 30)) == 2

"""The memory one poll holds at its peak while the agent has many PRs open.

Every poll looks at the agent's own open PRs updated in `comment_handling.followup_days`
(review-thread follow-ups, SPEC 3): with a busy bot, up to a thousand of them (GitHub's
search serves ten pages of 100). A PR examined already as it stands is not offered
again, so a poll of an unchanged thousand offers nothing, but it still reads them all.
The peak is what the process's memory must hold for it, each poll, amid its runs.

The sandbox GitHub (answers gzipped, as api.github.com's) holds `--pulls` open PRs of
the bot (100, then 1,000), all examined already. One `AgentService`'s producer polls
twice (the first fills the answer cache, as a long `serve` has it); the second is
measured with tracemalloc: the peak of the Python allocations it made (over what was
allocated when it began) and what it left allocated. The sandbox answers from a thread
of this process, so its own allocations for the answers are in the figures too: compare
variants by their difference, which is the agent's.

Run: `python benchmarks/bench_poll_memory.py [--pulls 100,1000]`
"""

from __future__ import annotations

import argparse
import asyncio
import tempfile
import tracemalloc
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

from _common import emit, seed_github

from coding_agent.config import parse_config
from coding_agent.runtime.service import AgentService
from coding_agent.sandbox.github import GitHubSandbox
from coding_agent.store.followups import FollowUpRecords

OWNER = "acme"
REPO = f"{OWNER}/widgets"
USER = "maintainer"
BOT = "bench-bot"
BOT_TOKEN = "bench-bot-token"


def _config(directory: Path, api_url: str) -> Any:
    data = {
        "task_source": "github",
        "github": {"api_url": api_url, "owner": OWNER, "token": BOT_TOKEN, "bot_name": BOT},
        # Never called: nothing is claimed.
        "llm": {"provider": "openai", "openai": {"base_url": "http://127.0.0.1:9/v1", "model": "unused", "api_key": "unused"}},
        "workspace": {"base_dir": str(directory / "workspaces")},
        "context_storage": {"base_dir": str(directory / "contexts")},
        "logging": {"dir": str(directory / "logs")},
        "database": {"url": f"sqlite:///{directory / 'state.db'}"},
    }
    return parse_config(data, source="bench_poll_memory", env={})


async def _measure(config: Any) -> dict[str, Any]:
    service = AgentService(config)
    try:
        # Every PR examined as it stands (its `updated_at` settled long ago, for the record).
        records = FollowUpRecords(service.store.engine, clock=lambda: 4e9)
        since = datetime.now(timezone.utc) - timedelta(days=7)
        async for page in service.sources[0].discover_review_followups(since):
            for pull in page:
                records.mark_seen(str(pull.key), pull.updated_at)
        queue = await service.queue()
        await service.producer.cycle(queue)  # fills the answer cache, as in a long `serve`
        tracemalloc.start()
        before, _ = tracemalloc.get_traced_memory()
        report = await service.producer.cycle(queue)
        after, peak = tracemalloc.get_traced_memory()
        tracemalloc.stop()
        if report.errors or report.enqueued:
            raise SystemExit(f"unexpected poll: errors={report.errors}, offered={len(report.enqueued)}")
        return {"peak_mb": round((peak - before) / 2**20, 2), "left_allocated_mb": round((after - before) / 2**20, 2)}
    finally:
        await service.aclose()


def _poll_with(pulls: int) -> dict[str, Any]:
    with GitHubSandbox(compress=True) as sandbox, tempfile.TemporaryDirectory() as scratch:
        seed_github(sandbox.state, [REPO], USER, BOT, BOT_TOKEN)
        for number in range(pulls):
            sandbox.state.create_pull(REPO, f"Change {number}", author=BOT, head=f"coding-agent/{number}-change")
        return asyncio.run(_measure(_config(Path(scratch), sandbox.url)))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pulls", default="100,1000", help="open PRs of the agent, one poll each (default 100,1000)")
    args = parser.parse_args()
    figures = {count: _poll_with(int(count)) for count in args.pulls.split(",")}
    emit({"benchmark": "poll_memory", "second_poll_by_open_pulls": figures})


if __name__ == "__main__":
    main()

"""Putting the queue's bookkeeping right after an outage (`QueueEntries.release_lost`):
only this queue's `queued` entries made before the queue's word, whose key it does not
hold, are released."""

from __future__ import annotations

from pathlib import Path

from coding_agent.store.queue_entries import QueueEntries

from tests.support.state import agent_store


def test_only_this_queue_s_queued_entries_it_no_longer_holds_are_released(tmp_path: Path) -> None:
    now = [1000.0]
    with agent_store(tmp_path) as store:
        entries = QueueEntries(store.engine, "rabbitmq:tasks", 3600, clock=lambda: now[0])
        others = QueueEntries(store.engine, "rabbitmq:elsewhere", 3600, clock=lambda: now[0])
        for key in ("github:acme/w#1", "github:acme/w#2", "github:acme/w#3"):
            assert entries.try_enqueue(key)
        entries.mark_running("github:acme/w#3")
        assert others.try_enqueue("github:acme/w#4")
        now[0] = 1010.0
        assert entries.try_enqueue("github:acme/w#5")  # queued after the queue's word

        released = entries.release_lost(frozenset({"github:acme/w#2"}), queued_before=1005.0)

        assert released == ["github:acme/w#1"]
        assert entries.states() == {
            "github:acme/w#2": "queued",
            "github:acme/w#3": "running",
            "github:acme/w#4": "queued",
            "github:acme/w#5": "queued",
        }
        assert entries.try_enqueue("github:acme/w#1"), "offered again"

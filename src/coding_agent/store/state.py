"""The state store: runs, leases, token usage, steering marks, trigger rejections, what
each task is (title, links) and the day's spend, in SQLite by default or PostgreSQL.

One object over one engine holding one store per table family (a module each beside
this one): what the runtime hands around, and what the `RunStore` port of
`domain/ports.py` describes. A caller reaches the family it needs by name
(`store.leases.acquire_lease(...)`, `store.runs.start_run(...)`), so each call says
which tables it touches.
"""

from __future__ import annotations

import time
from collections.abc import Callable

from sqlalchemy.exc import OperationalError

from coding_agent.redaction import Redactor
from coding_agent.store.budget_spend import BudgetSpend
from coding_agent.store.ci_watches import CiWatches
from coding_agent.store.engine import open_engine
from coding_agent.store.leases import Leases
from coding_agent.store.run_steering import RunSteering
from coding_agent.store.runs import Runs
from coding_agent.store.task_facts import TaskFacts
from coding_agent.store.trigger_rejections import TriggerRejections

__all__ = ["StateStore", "store_unreachable"]


class StateStore:
    """The table families on one engine. Their methods are short blocking transactions.

    `engine` is there for the stores that keep their tables beside these and are opened
    where they are used (memories, queue entries, webhook deliveries, follow-up records).
    """

    def __init__(self, url: str, clock: Callable[[], float] = time.time) -> None:
        self.url = url
        self.engine = open_engine(url)
        self.leases = Leases(self.engine, clock)
        self.runs = Runs(self.engine, clock, lost=self.leases.let_go)
        self.steering = RunSteering(self.engine, clock)
        self.tasks = TaskFacts(self.engine, clock)
        self.rejections = TriggerRejections(self.engine, clock)
        self.spend = BudgetSpend(self.engine, clock)
        self.ci_watches = CiWatches(self.engine, clock)

    def close(self) -> None:
        self.engine.dispose()


def store_unreachable(error: OperationalError, redactor: Redactor) -> str:
    """What to log when the database cannot be reached (a restart, a failover, a
    network blip; its pool connects again at the next use): the driver's first line (no
    SQL, no parameters), redacted. The service's loops log it and go on."""
    reason = (str(error.orig or error).strip().splitlines() or [type(error).__name__])[0]
    return f"the state store cannot be reached ({redactor.text(reason)})"

"""The state store: runs, leases, token usage, steering marks, trigger rejections and
what each task is (title, links), in SQLite by default or PostgreSQL.

One object over one engine, composed of the table families beside it (one module
each, all on the `TableStore` base): what the runtime hands around and the ports in
`domain/ports.py` describe. `TableStore`, `LEASES` and `new_owner_id` are re-exported
here for the stores and callers that import them from this, their old, home.
"""

from __future__ import annotations

import time
from collections.abc import Callable

from sqlalchemy.engine import Engine
from sqlalchemy.exc import OperationalError

from coding_agent.domain.runs import RunMarks, RunRecord
from coding_agent.redaction import Redactor
from coding_agent.store.budget_spend import BudgetSpend
from coding_agent.store.engine import TableStore, open_engine
from coding_agent.store.leases import LEASES, Leases, new_owner_id
from coding_agent.store.run_steering import RunSteering
from coding_agent.store.runs import Runs
from coding_agent.store.task_facts import TaskFact, TaskFacts
from coding_agent.store.trigger_rejections import TriggerRejections

__all__ = ["StateStore", "RunRecord", "RunMarks", "TaskFact", "new_owner_id", "TableStore", "LEASES", "store_unreachable"]


class StateStore(Leases, Runs, RunSteering, TriggerRejections, TaskFacts, BudgetSpend):
    """Runs, leases, token usage, steering marks, trigger rejections, what each task is,
    the day's spend (budgets). Methods are short blocking transactions."""

    def __init__(self, url: str, clock: Callable[[], float] = time.time) -> None:
        self.url = url
        super().__init__(open_engine(url), clock)

    @property
    def engine(self) -> Engine:
        """The database, for stores of other modules that keep their tables beside these."""
        return self._engine

    def close(self) -> None:
        self._engine.dispose()


def store_unreachable(error: OperationalError, redactor: Redactor) -> str:
    """What to log when the database cannot be reached (a restart, a failover, a
    network blip; its pool connects again at the next use): the driver's first line (no
    SQL, no parameters), redacted. The service's loops log it and go on."""
    reason = (str(error.orig or error).strip().splitlines() or [type(error).__name__])[0]
    return f"the state store cannot be reached ({redactor.text(reason)})"

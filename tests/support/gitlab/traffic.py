"""The GitLab testing server's log of answered requests."""

from __future__ import annotations

from tests.support.gitlab.models import RequestRecord
from tests.support.gitlab.tables import GitLabTables

__all__ = ["Traffic"]


class Traffic(GitLabTables):
    """Every request answered, for tests to count."""

    # -- request log -------------------------------------------------------------

    def log_request(self, record: RequestRecord) -> None:
        with self.lock:
            self._requests.append(record)

    def requests(self) -> list[RequestRecord]:
        with self.lock:
            return list(self._requests)

    def clear_requests(self) -> None:
        with self.lock:
            self._requests.clear()

    def count_requests(
        self, method: str | None = None, path_contains: str | None = None, *, not_modified: bool | None = None
    ) -> int:
        """How many logged requests match all the given filters."""
        with self.lock:
            return sum(
                1
                for record in self._requests
                if (method is None or record.method == method.upper())
                and (path_contains is None or path_contains in record.path)
                and (not_modified is None or record.not_modified == not_modified)
            )

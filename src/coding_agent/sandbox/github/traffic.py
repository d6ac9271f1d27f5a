"""The GitHub testing server's rate limit and its log of answered requests."""

from __future__ import annotations

import time

from coding_agent.sandbox.github.records import RequestRecord
from coding_agent.sandbox.github.tables import GitHubTables

__all__ = ["Traffic"]


class Traffic(GitHubTables):
    """Requests counted against the rate limit, and every request answered."""

    # ---------------------------------------------------------------- rate limit and request log

    def set_rate_limit(self, *, remaining: int | None = None, limit: int | None = None, reset_in: float | None = None) -> None:
        """Adjust the sandbox rate limit, e.g. `remaining=0` to make the next request a 403."""
        with self._lock:
            if limit is not None:
                self.rate_limit.limit = limit
            if remaining is not None:
                self.rate_limit.remaining = remaining
                self.rate_limit.used = self.rate_limit.limit - remaining
            if reset_in is not None:
                self.rate_limit.reset = int(time.time() + reset_in)

    def take_rate_limit(self) -> bool:
        """Count one request against the limit; False when it is exhausted (answer 403)."""
        with self._lock:
            limit = self.rate_limit
            if limit.reset <= time.time():
                limit.remaining, limit.used, limit.reset = limit.limit, 0, int(time.time()) + 3600
            if limit.remaining <= 0:
                return False
            limit.remaining -= 1
            limit.used += 1
            return True

    def give_back_rate_limit(self) -> None:
        """Undo `take_rate_limit` for a request that turned out to be a 304."""
        with self._lock:
            self.rate_limit.remaining = min(self.rate_limit.remaining + 1, self.rate_limit.limit)
            self.rate_limit.used = max(self.rate_limit.used - 1, 0)

    def rate_limit_headers(self) -> dict[str, str]:
        with self._lock:
            limit = self.rate_limit
            return {
                "X-RateLimit-Limit": str(limit.limit),
                "X-RateLimit-Remaining": str(limit.remaining),
                "X-RateLimit-Reset": str(limit.reset),
                "X-RateLimit-Used": str(limit.used),
                "X-RateLimit-Resource": "core",
            }

    def log_request(self, record: RequestRecord) -> None:
        with self._lock:
            self._requests.append(record)

    def requests(self) -> list[RequestRecord]:
        """Every request answered so far, oldest first."""
        with self._lock:
            return list(self._requests)

    def clear_requests(self) -> None:
        with self._lock:
            self._requests.clear()

    def counted_requests(self) -> list[RequestRecord]:
        """Requests that count against the rate limit: all but 304s and injected faults."""
        return [r for r in self.requests() if not r.not_modified and not r.fault]

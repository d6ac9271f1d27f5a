"""The sections of the service around the runs: scheduling, retries, logging, the database,
the queue, webhooks, the dashboard.
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field, SecretStr, field_validator, model_validator

from coding_agent.config.base import _Strict

__all__ = [
    "SchedulingConfig",
    "LoggingConfig",
    "DatabaseConfig",
    "QueueConfig",
    "WebhooksConfig",
    "RetryConfig",
    "DashboardConfig",
]


class SchedulingConfig(_Strict):
    interval_seconds: float = Field(default=60, gt=0)
    # a stopped worker's task is taken over this long after its last heartbeat (every third of it)
    lease_seconds: float = Field(default=60, gt=0)
    # runs between their claim and a ready clone at once (null: the CPU count); the others wait their turn
    starts_at_once: int | None = Field(default=None, ge=1)
    # how long a run waits for a start slot before it goes ahead without one (a huge clone holds the others back no longer)
    start_wait_seconds: float = Field(default=2.0, gt=0)


class LoggingConfig(_Strict):
    dir: str = "logs"
    level: Literal["DEBUG", "INFO", "WARNING", "ERROR"] = "INFO"
    backup_count: int = Field(default=14, ge=0)


class DatabaseConfig(_Strict):
    url: str = "sqlite:///coding-agent.db"

    @field_validator("url")
    @classmethod
    def _usable_url(cls, value: str) -> str:
        """Checked at start, not at the first query; the URL itself is never echoed (it may
        hold a password)."""
        # Imported here: sqlalchemy costs a quarter of a CPU-second, and importing the
        # config (every CLI command, the standalone workspace server) should not pay it.
        from sqlalchemy.engine import make_url
        from sqlalchemy.exc import ArgumentError, NoSuchModuleError

        try:
            url = make_url(value)
            backend = url.get_backend_name()
            url.get_dialect()
        except (ArgumentError, ValueError):
            raise ValueError("not a database URL (sqlite:///path/to/state.db or postgresql://user@host/db)") from None
        except NoSuchModuleError:
            raise ValueError("unknown database kind; use sqlite:///... or postgresql://...") from None
        if backend not in ("sqlite", "postgresql"):
            raise ValueError(f"{backend} is not supported; use sqlite:///... or postgresql://...")
        if backend == "sqlite" and url.database in (None, "", ":memory:"):
            raise ValueError("SQLite needs a file (sqlite:///path/to/state.db): an in-memory store forgets every task")
        return value


class QueueConfig(_Strict):
    """Between producer and workers (SPEC 11.1): `memory` in-process, or RabbitMQ."""

    backend: Literal["memory", "rabbitmq"] = "memory"
    url: str = "amqp://guest:guest@127.0.0.1:5672/"
    name: str = Field(default="coding-agent.tasks", min_length=1, max_length=200)
    prefetch: int | None = Field(default=None, ge=1)  # None: `workers`


class WebhooksConfig(_Strict):
    """`POST /webhooks/github|gitlab` (SPEC 11.2); an endpoint without its secret is off."""

    github_secret: SecretStr | None = None
    gitlab_token: SecretStr | None = None


class RetryConfig(_Strict):
    """Transient-error retries for forge and model calls (SPEC 4)."""

    retries: int = Field(default=3, ge=0)
    base_delay_seconds: float = Field(default=1.0, ge=0)
    max_delay_seconds: float = Field(default=60.0, ge=0)
    # One forge request, whole (also when answered through the conditional-request cache).
    forge_timeout_seconds: float = Field(default=30.0, gt=0)


class DashboardConfig(_Strict):
    """The web dashboard of `serve` (SPEC 11.3). Beyond localhost every page needs `token`."""

    enabled: bool = True
    bind: str = Field(default="127.0.0.1:8080", pattern=r"^\[?[A-Za-z0-9.:-]*\]?:[0-9]{1,5}$")
    token: SecretStr | None = None

    @property
    def host_port(self) -> tuple[str, int]:
        host, _, port = self.bind.rpartition(":")
        return host.strip("[]") or "0.0.0.0", int(port)

    @property
    def local_only(self) -> bool:
        """Bound to a loopback address: nothing beyond this machine can reach it."""
        return self.host_port[0] in ("127.0.0.1", "localhost", "::1")

    @model_validator(mode="after")
    def _token_beyond_localhost(self) -> DashboardConfig:
        if self.enabled and not self.local_only and (self.token is None or not self.token.get_secret_value()):
            raise ValueError(f"dashboard.bind {self.bind} is beyond localhost: set dashboard.token")
        return self

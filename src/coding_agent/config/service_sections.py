"""The sections of the service around the runs: scheduling, retries, logging, the database,
the queue, webhooks, the dashboard.
"""

from __future__ import annotations

import logging
from typing import Any, Literal
from urllib.parse import urlsplit

from pydantic import Field, SecretStr, field_validator, model_validator

from coding_agent.config.base import _Strict

log = logging.getLogger(__name__)

# Keys an earlier release read and this one no longer needs: a config that still sets one
# loads (with a warning naming it) rather than failing an upgrade over a setting that now
# changes nothing.
_RETIRED_SCHEDULING_KEYS = {
    "starts_at_once": "runs start as soon as a worker slot is free",
    "start_wait_seconds": "runs start as soon as a worker slot is free",
}
_RETIRED_WEBHOOKS_KEYS = {
    # a count of bodies read at once let a few stalled ones refuse every delivery (SPEC 15)
    "max_concurrent": "bodies are bounded by the bytes in flight and stalled ones are cut",
}


def _drop_retired(section: str, retired: dict[str, str], data: Any) -> Any:
    """`data` without the `retired` keys, each logged as a warning naming it."""
    if not isinstance(data, dict):
        return data
    kept = dict(data)
    for key, why in retired.items():
        if key in kept:
            del kept[key]
            log.warning("config: %s.%s is no longer used (%s); remove it", section, key, why)
    return kept

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
    @model_validator(mode="before")
    @classmethod
    def _drop_retired_keys(cls, data: Any) -> Any:
        return _drop_retired("scheduling", _RETIRED_SCHEDULING_KEYS, data)

    interval_seconds: float = Field(default=60, gt=0)
    # a stopped worker's task is taken over this long after its last heartbeat (every third of it)
    lease_seconds: float = Field(default=60, gt=0)
    # `serve`/`worker`: after this many runs, the process starts itself afresh (same pid and
    # listening socket) at its next moment with no run in progress; 0: never
    restart_after_runs: int = Field(default=500, ge=0)
    # SIGTERM/SIGINT: the runs pause at their next checkpoint within this time; a model
    # request or tool call still in flight then is cut (SPEC 8.3). Under `docker stop`'s 10 s.
    shutdown_grace_seconds: float = Field(default=8, ge=0, le=3600)


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

    @model_validator(mode="before")
    @classmethod
    def _drop_retired_keys(cls, data: Any) -> Any:
        return _drop_retired("webhooks", _RETIRED_WEBHOOKS_KEYS, data)

    github_secret: SecretStr | None = None
    gitlab_token: SecretStr | None = None
    gitlab_signing_token: SecretStr | None = None
    # every body read before the sender is known (webhooks, /login, the dashboard's
    # actions) not received whole by then is cut off: 408 and the connection closed
    body_timeout_seconds: float = Field(default=10.0, gt=0, le=300)


class RetryConfig(_Strict):
    """Transient-error retries for forge and model calls (SPEC 4)."""

    retries: int = Field(default=3, ge=0)
    base_delay_seconds: float = Field(default=1.0, ge=0)
    max_delay_seconds: float = Field(default=60.0, ge=0)
    # One forge request, whole (also when answered through the conditional-request cache).
    forge_timeout_seconds: float = Field(default=30.0, gt=0)


_LOOPBACK = ("127.0.0.1", "localhost", "::1")


class DashboardConfig(_Strict):
    """The web dashboard of `serve` (SPEC 11.3). Beyond localhost every page needs `token`."""

    enabled: bool = True
    bind: str = Field(default="127.0.0.1:8080", pattern=r"^\[?[A-Za-z0-9.:-]*\]?:[0-9]{1,5}$")
    token: SecretStr | None = None
    public_url: str | None = None

    @property
    def host_port(self) -> tuple[str, int]:
        host, _, port = self.bind.rpartition(":")
        return host.strip("[]") or "0.0.0.0", int(port)

    @property
    def local_only(self) -> bool:
        """Bound to a loopback address and named by no other: nothing beyond this machine
        reaches it (a `public_url` elsewhere means a proxy or a published port does)."""
        public = urlsplit(self.public_url).hostname if self.public_url else None
        return all(host in _LOOPBACK for host in (self.host_port[0], public) if host is not None)

    @field_validator("public_url")
    @classmethod
    def _http_url(cls, value: str | None) -> str | None:
        if value is None:
            return None
        parts = urlsplit(value.strip())
        try:
            parts.port  # noqa: B018 - a bad port raises here
        except ValueError:
            raise ValueError("not an http(s) URL: bad port") from None
        if parts.scheme not in ("http", "https") or not parts.hostname or "@" in parts.netloc:
            raise ValueError("not an http(s) URL such as https://agent.example.com")
        if parts.path not in ("", "/") or parts.query or parts.fragment:
            raise ValueError("the dashboard is served at the root of its host: give the URL without a path")
        default_port = {"http": 80, "https": 443}[parts.scheme]
        netloc = parts.netloc.lower().removesuffix(f":{default_port}")
        return f"{parts.scheme}://{netloc}"  # an origin as browsers write it in `Origin`

    @model_validator(mode="after")
    def _token_beyond_localhost(self) -> DashboardConfig:
        if self.enabled and not self.local_only and (self.token is None or not self.token.get_secret_value()):
            beyond = self.bind if self.host_port[0] not in _LOOPBACK else self.public_url
            key = "bind" if beyond == self.bind else "public_url"
            raise ValueError(f"dashboard.{key} {beyond} is beyond localhost: set dashboard.token")
        return self

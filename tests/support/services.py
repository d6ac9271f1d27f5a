"""The real PostgreSQL and RabbitMQ of the distributed-mode tests: a fresh database or
queue per test, dropped afterwards, and a skip (naming what is missing) without them.

Defaults match the development machine (PostgreSQL trust auth on 127.0.0.1:5432, RabbitMQ
guest/guest on 127.0.0.1:5672); `CODING_AGENT_TEST_POSTGRES` / `CODING_AGENT_TEST_AMQP`
point elsewhere.
"""

from __future__ import annotations

import os
import socket
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from urllib.parse import urlsplit

__all__ = ["postgres_admin_url", "amqp_url", "reachable", "fresh_postgres_database", "delete_queues"]


def postgres_admin_url() -> str:
    return os.environ.get("CODING_AGENT_TEST_POSTGRES", "postgresql+psycopg://postgres@127.0.0.1:5432/test")


def amqp_url() -> str:
    return os.environ.get("CODING_AGENT_TEST_AMQP", "amqp://guest:guest@127.0.0.1:5672/")


def reachable(url: str) -> bool:
    """Something listens at the URL's host and port (a cheap probe before a real connect)."""
    parts = urlsplit(url)
    default = 5672 if parts.scheme.startswith("amqp") else 5432
    with socket.socket() as probe:
        probe.settimeout(0.5)
        return probe.connect_ex((parts.hostname or "127.0.0.1", parts.port or default)) == 0


@contextmanager
def fresh_postgres_database() -> Iterator[str]:
    """A new, empty database; yields its SQLAlchemy URL and drops it afterwards."""
    from sqlalchemy import create_engine, text
    from sqlalchemy.engine import make_url

    admin_url = make_url(postgres_admin_url())
    name = f"ca_test_{uuid.uuid4().hex[:12]}"
    admin = create_engine(admin_url, isolation_level="AUTOCOMMIT")
    try:
        with admin.connect() as connection:
            connection.execute(text(f'CREATE DATABASE "{name}"'))
        yield admin_url.set(database=name).render_as_string(hide_password=False)
    finally:
        with admin.connect() as connection:
            connection.execute(text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
        admin.dispose()


async def delete_queues(name: str) -> None:
    """Delete the queue `name`, its dead-letter queue and its wait queue from the test RabbitMQ."""
    import aio_pika

    connection = await aio_pika.connect_robust(amqp_url())
    async with connection:
        channel = await connection.channel()
        for queue in (name, f"{name}.dead", f"{name}.wait"):
            await channel.queue_delete(queue)

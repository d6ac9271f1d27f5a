"""Webhook deliveries already received, by delivery id, so a redelivered event (SPEC
11.2) is ignored; kept a week, beyond GitHub's three days of redeliveries."""

from __future__ import annotations

from sqlalchemy import Float, String, delete
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Mapped, mapped_column

from coding_agent.store.engine import Base, TableStore

__all__ = ["DeliveryLog"]

KEEP_DELIVERIES_SECONDS = 7 * 86400.0  # GitHub redelivers for up to 3 days; keep a week


class _Delivery(Base):
    __tablename__ = "webhook_deliveries"
    delivery_id: Mapped[str] = mapped_column(String(200), primary_key=True)
    received_at: Mapped[float] = mapped_column(Float, index=True)


class DeliveryLog(TableStore):
    def first(self, delivery_id: str) -> bool:
        """Record `delivery_id`; False when it was recorded before (a redelivery)."""
        now = self._clock()
        try:
            with self._session() as session:
                session.add(_Delivery(delivery_id=delivery_id, received_at=now))
        except IntegrityError:
            return False
        with self._session() as session:
            session.execute(delete(_Delivery).where(_Delivery.received_at < now - KEEP_DELIVERIES_SECONDS))
        return True

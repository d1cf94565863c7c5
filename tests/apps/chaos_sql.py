"""The chaos suite's ``idempotency="sql"`` app (see tests/apps/chaos_common.py for its settings).

Every handler call adds one row to ``chaos_effects`` before deciding; ``ok`` messages keep it,
``reject`` (DeadLetter) and ``fail`` (RuntimeError, every delivery) messages must have it rolled
back. ``message_id`` is deliberately not unique: a message applied twice shows as two rows.
"""

from __future__ import annotations

import time

import sqlalchemy as sa
from sqlalchemy.orm import DeclarativeBase, Mapped, Session, mapped_column

from streamworker import App, DeadLetter, Message
from tests.apps.chaos_common import HANDLER_OPTIONS, SLEEP_S, SLOW_S, STREAM, Order, record

app = App("chaos-sql")


class Base(DeclarativeBase):
    pass


class Effect(Base):
    __tablename__ = "chaos_effects"

    id: Mapped[int] = mapped_column(primary_key=True, autoincrement=True)
    message_id: Mapped[str] = mapped_column(sa.String(41), index=True)
    n: Mapped[int]
    consumer: Mapped[str] = mapped_column(sa.String(64))


@app.handler(STREAM, idempotency="sql", **HANDLER_OPTIONS)
def apply(msg: Message[Order], session: Session) -> None:
    record(msg)
    order = msg.body
    session.add(Effect(message_id=msg.id, n=order.n, consumer=msg.consumer))
    if SLEEP_S:
        time.sleep(SLEEP_S)
    if order.kind == "slow":
        time.sleep(SLOW_S)
    if order.kind == "reject":
        raise DeadLetter(f"order {order.n} rejected")
    if order.kind == "fail":
        raise RuntimeError(f"order {order.n} always fails")

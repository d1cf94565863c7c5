"""The failover tests' app: one stream, three groups, one handler per idempotency strategy.

- ``lua`` (idempotency="lua") adds 1 to the message's field of ``{ha}:applied``: a field above 1
  is a message applied twice.
- ``sql`` (idempotency="sql") adds a row to ``ha_effects`` (``message_id`` not unique on purpose:
  a message applied twice shows as two rows). Needs STREAMWORKER_DB_URL.
- ``plain`` (at-least-once) appends "<id>" to the file SW_HA_LOG for every call.

``max_deliveries`` is low (3) on purpose: an outage wrongly counted as a handler failure would
dead-letter healthy messages within a failover or two.
"""

from __future__ import annotations

import os
from typing import Any

import sqlalchemy as sa
from sqlalchemy.orm import DeclarativeBase, Mapped, Session, mapped_column

from streamworker import App, Effects, Message

app = App("ha-mixed")

STREAM = "{ha}:orders"
APPLIED = "{ha}:applied"
_LOG = os.environ.get("SW_HA_LOG", "ha_plain.log")

OPTIONS: dict[str, Any] = {
    "batch_size": 10,
    "block_ms": 200,
    "claim_idle_ms": 3000,
    "max_deliveries": 3,
    "retry_backoff_ms": 10,
    "retry_backoff_max_ms": 200,
}


class Base(DeclarativeBase):
    pass


class Effect(Base):
    __tablename__ = "ha_effects"

    id: Mapped[int] = mapped_column(primary_key=True, autoincrement=True)
    message_id: Mapped[str] = mapped_column(sa.String(41), index=True)


@app.handler(STREAM, group="lua", idempotency="lua", name="lua", **OPTIONS)
def apply_lua(msg: Message) -> Effects:
    return Effects().hincrby(APPLIED, msg.id, 1)


@app.handler(STREAM, group="sql", idempotency="sql", name="sql", **OPTIONS)
def apply_sql(msg: Message, session: Session) -> None:
    session.add(Effect(message_id=msg.id))


@app.handler(STREAM, group="plain", name="plain", **OPTIONS)
def apply_plain(msg: Message) -> None:
    # O_APPEND: a line is whole even if the process dies right after.
    with open(_LOG, "a", encoding="utf-8") as f:
        f.write(f"{msg.id}\n")

"""Orders -> charges, effectively once: each order on stream ``orders`` becomes exactly one row in
``charges``, committed in the same transaction as streamworker's processed-messages row.

    streamworker migrate --db-url sqlite:///orders.db
    python -c "import app; app.create_tables('sqlite:///orders.db')"
    streamworker run examples/sql_orders/app.py:app --db-url sqlite:///orders.db
"""

from __future__ import annotations

import sqlalchemy as sa
from pydantic import BaseModel
from sqlalchemy.orm import DeclarativeBase, Mapped, Session, mapped_column

from streamworker import App, DeadLetter, Message

app = App("sql-orders")


class OrderPlaced(BaseModel):
    order_id: int
    amount_cents: int


class Base(DeclarativeBase):
    pass


class Charge(Base):
    """One charge per order. No unique constraint: streamworker, not the schema, keeps it single."""

    __tablename__ = "charges"

    id: Mapped[int] = mapped_column(primary_key=True, autoincrement=True)
    order_id: Mapped[int]
    amount_cents: Mapped[int]
    message_id: Mapped[str] = mapped_column(sa.String(41))


def create_tables(db_url: str) -> None:
    """The application's own table (streamworker's comes from `streamworker migrate`)."""
    engine = sa.create_engine(db_url.replace("+aiosqlite", ""))
    Base.metadata.create_all(engine)
    engine.dispose()


@app.handler("orders", group="billing", idempotency="sql", batch_size=50)
def charge(msg: Message[OrderPlaced], session: Session) -> None:
    """Runs in the batch's transaction: no commit here; streamworker commits, then acks."""
    if msg.body.amount_cents <= 0:
        raise DeadLetter(f"order {msg.body.order_id} has no amount")
    session.add(
        Charge(order_id=msg.body.order_id, amount_cents=msg.body.amount_cents, message_id=msg.id)
    )

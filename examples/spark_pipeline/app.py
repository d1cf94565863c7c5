"""The handler the pipeline backfills: each order on stream ``shop:orders`` books one invoice row.
The same App runs live with ``streamworker run examples.spark_pipeline.app:app --db-url …``."""

from __future__ import annotations

import sqlalchemy as sa
from pydantic import BaseModel
from sqlalchemy.orm import DeclarativeBase, Mapped, Session, mapped_column

from streamworker import App, Message

app = App("shop-invoicing")


class Base(DeclarativeBase):
    pass


class Invoice(Base):
    __tablename__ = "invoices"

    id: Mapped[int] = mapped_column(primary_key=True, autoincrement=True)
    message_id: Mapped[str] = mapped_column(sa.String(41))
    customer: Mapped[str] = mapped_column(sa.String(64))
    amount_cents: Mapped[int]


class Order(BaseModel):
    customer: str
    amount_cents: int


@app.handler("shop:orders", group="invoicing", idempotency="sql")
def invoice(msg: Message[Order], session: Session) -> None:
    if msg.body.amount_cents <= 0:
        raise ValueError(f"order {msg.id} has no amount")
    session.add(
        Invoice(message_id=msg.id, customer=msg.body.customer, amount_cents=msg.body.amount_cents)
    )


def create_tables(db_url: str) -> None:
    """Create the invoices table (the processed-messages table comes from streamworker migrate)."""
    engine = sa.create_engine(db_url)
    Base.metadata.create_all(engine)
    engine.dispose()

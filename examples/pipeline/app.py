"""A three-stage exactly-once pipeline: orders -> payments -> ledger -> a final count.

* ``billing`` (``idempotency="sql"``): each order on ``{shop}:orders`` adds a ``charges`` row and
  stages a ``Payment`` for ``{shop}:payments`` in the transactional outbox, in the same commit as
  the row and the message's processed row. ``streamworker relay`` moves it to the stream, once.
* ``accounting`` (``idempotency="lua"``): each payment adds its amount to the customer's balance
  and publishes a ``LedgerEntry`` to ``{shop}:ledger`` with ``Effects.publish``, applied in the
  script that acks the payment.
* ``reporting`` (``idempotency="lua"``): counts each ledger entry.

Every key shares the hash tag ``{shop}``, so the Lua stages run on Redis Cluster too. The hashes
``{shop}:paid`` and ``{shop}:counted`` (order id -> how often its effect applied) exist so that a
demo or a test can check "exactly once" per order; a real app keeps only its balances and totals.

Run it (after ``streamworker migrate`` and :func:`create_tables`)::

    streamworker run examples/pipeline/app.py:app --db-url sqlite:///shop.db
    streamworker relay --db-url sqlite:///shop.db
"""

from __future__ import annotations

import sqlalchemy as sa
from pydantic import BaseModel
from sqlalchemy.orm import DeclarativeBase, Mapped, Session, mapped_column

from streamworker import App, Effects, Message
from streamworker.idempotency.sql.outbox import publish

ORDERS = "{shop}:orders"
PAYMENTS = "{shop}:payments"
LEDGER = "{shop}:ledger"
BALANCES = "{shop}:balances"
PAID = "{shop}:paid"
COUNTED = "{shop}:counted"
TOTAL = "{shop}:ledger_total"

app = App("shop-pipeline")


class Order(BaseModel):
    order_id: int
    customer: str
    cents: int


class Payment(BaseModel):
    order_id: int
    customer: str
    cents: int


class LedgerEntry(BaseModel):
    order_id: int
    account: str
    debit_cents: int


class Base(DeclarativeBase):
    pass


class Charge(Base):
    """Stage 1's business row. ``order_id`` is deliberately not unique: a second charge of one
    order would show as a second row instead of being hidden by the database."""

    __tablename__ = "shop_charges"

    id: Mapped[int] = mapped_column(primary_key=True, autoincrement=True)
    order_id: Mapped[int] = mapped_column(index=True)
    customer: Mapped[str] = mapped_column(sa.String(64))
    cents: Mapped[int]


def create_tables(db_url: str) -> None:
    """Create the business table (streamworker's own tables come from ``streamworker migrate``)."""
    engine = sa.create_engine(db_url)
    Base.metadata.create_all(engine)
    engine.dispose()


# max_deliveries well above what crashes can add to a healthy message (the chaos test kills a lot).
HANDLER = {
    "batch_size": 20,
    "block_ms": 100,
    "claim_idle_ms": 2_000,
    "retry_backoff_ms": 20,
    "max_deliveries": 20,
}


@app.handler(ORDERS, group="billing", idempotency="sql", **HANDLER)
def bill(msg: Message[Order], session: Session) -> None:
    order = msg.body
    session.add(Charge(order_id=order.order_id, customer=order.customer, cents=order.cents))
    publish(session, PAYMENTS, Payment(**order.model_dump()))


@app.handler(PAYMENTS, group="accounting", idempotency="lua", **HANDLER)
def account(msg: Message[Payment]) -> Effects:
    payment = msg.body
    return (
        Effects()
        .hincrby(BALANCES, payment.customer, payment.cents)
        .hincrby(PAID, str(payment.order_id), 1)
        .publish(
            LEDGER,
            LedgerEntry(
                order_id=payment.order_id, account=payment.customer, debit_cents=payment.cents
            ),
        )
    )


@app.handler(LEDGER, group="reporting", idempotency="lua", **HANDLER)
def count(msg: Message[LedgerEntry]) -> Effects:
    return Effects().hincrby(COUNTED, str(msg.body.order_id), 1).incr(TOTAL)

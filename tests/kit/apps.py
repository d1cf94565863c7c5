"""Apps the test-kit tests run (module level, as users write them)."""

from __future__ import annotations

import dataclasses

import sqlalchemy as sa
from pydantic import BaseModel
from sqlalchemy.orm import DeclarativeBase, Mapped, Session, mapped_column

from streamworker import App, DeadLetter, Effects, Message, Retry


class Order(BaseModel):
    order_id: int
    amount_cents: int


@dataclasses.dataclass
class Click:
    page: str
    user: str


class Payload(BaseModel):
    order: Order
    tags: list[str]


orders = App("orders")
charged: list[int] = []
flaky_failures: dict[int, int] = {}


@orders.handler("orders", group="billing", max_deliveries=3)
async def on_order(msg: Message[Order]) -> None:
    if msg.body.amount_cents <= 0:
        raise DeadLetter(f"order {msg.body.order_id} has no amount")
    if msg.body.order_id in flaky_failures and flaky_failures[msg.body.order_id] > 0:
        flaky_failures[msg.body.order_id] -= 1
        raise RuntimeError("payment service timed out")
    charged.append(msg.body.order_id)


slow = App("slow")


@slow.handler("later", group="g")
async def always_later(msg: Message[Order]) -> None:
    raise Retry(delay_ms=60_000)


clicks = App("clicks")


@clicks.handler("clicks", group="counters", idempotency="lua")
def count(msg: Message[Click]) -> Effects:
    return (
        Effects().hincrby("{clicks}:views", msg.body.page, 1).sadd("{clicks}:users", msg.body.user)
    )


nested = App("nested")
seen_payloads: list[Payload] = []


@nested.handler("payloads", group="g", body_field="json")
async def on_payload(msg: Message[Payload]) -> None:
    seen_payloads.append(msg.body)


class Base(DeclarativeBase):
    pass


class Charge(Base):
    __tablename__ = "charges"
    id: Mapped[int] = mapped_column(primary_key=True, autoincrement=True)
    order_id: Mapped[int]


def create_tables(db_url: str) -> None:
    engine = sa.create_engine(db_url)
    Base.metadata.create_all(engine)
    engine.dispose()


ledger = App("ledger")


@ledger.handler("orders", group="ledger", idempotency="sql")
def book(msg: Message[Order], session: Session) -> None:
    if msg.body.amount_cents <= 0:
        raise DeadLetter("no amount")
    session.add(Charge(order_id=msg.body.order_id))

"""``Effects.publish`` in an ``idempotency="lua"`` handler: the typed entry is added with the
message's XACK, and the next stage's ``Message[Model]`` decodes it back into an equal model."""

from __future__ import annotations

import datetime
import decimal

import pytest
import redis
from pydantic import BaseModel

from streamworker import App, Effects, Message
from streamworker.core.codec import EncodeError
from tests.support.worker import eventually, running_worker


class Payment(BaseModel):
    order_id: int
    amount: decimal.Decimal
    at: datetime.datetime
    lines: list[int]


class Loose(BaseModel):
    data: object


@pytest.mark.parametrize("body_field", [None, "payload"])
async def test_a_published_model_reaches_the_next_stage_as_an_equal_model(
    body_field: str | None, redis_url: str, redis_client: redis.Redis
) -> None:
    app = App("t")
    seen: list[Payment] = []

    @app.handler("{pay}", group="g", idempotency="lua", block_ms=100)
    def stage1(msg: Message) -> Effects:
        n = int(msg.fields["n"])
        payment = Payment(
            order_id=n,
            amount=decimal.Decimal("1.25") * n,
            at=datetime.datetime(2026, 1, 1, tzinfo=datetime.UTC),
            lines=[n, n + 1],
        )
        return Effects().publish("{pay}:ledger", payment, body_field=body_field)

    @app.handler("{pay}:ledger", group="g", block_ms=100, body_field=body_field)
    def stage2(msg: Message[Payment]) -> None:
        seen.append(msg.body)

    for n in range(3):
        redis_client.xadd("{pay}", {"n": str(n)})
    async with running_worker(app, redis_url):
        await eventually(lambda: len(seen) == 3, what="3 payments in stage 2")
    assert sorted(p.order_id for p in seen) == [0, 1, 2]
    assert seen[0].amount == decimal.Decimal("1.25") * seen[0].order_id
    assert seen[0].lines == [seen[0].order_id, seen[0].order_id + 1]


def test_a_value_that_cannot_be_encoded_is_a_permanent_failure() -> None:
    with pytest.raises(EncodeError, match="would decode as text"):
        Effects().publish("{s}:out", Loose(data=[1]))

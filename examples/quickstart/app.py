"""The quick-start App: an order handler with a validated body.

Run it against any Redis with ``streamworker run examples/quickstart/app.py:app --redis-url URL``;
``demo.py`` beside it produces orders, runs this App in-process and prints what was processed.
"""

from __future__ import annotations

from pydantic import BaseModel

from streamworker import App, DeadLetter, Message

app = App("quickstart")

processed: list[str] = []


class OrderPlaced(BaseModel):
    order_id: int
    amount_cents: int


@app.handler("orders", group="billing", batch_size=50, block_ms=200)
async def on_order(msg: Message[OrderPlaced]) -> None:
    order = msg.body
    if order.amount_cents <= 0:
        # A business rule that can never pass: straight to the dead-letter stream.
        raise DeadLetter(f"order {order.order_id} has no amount")
    processed.append(f"charged order {order.order_id}: {order.amount_cents / 100:.2f} EUR")

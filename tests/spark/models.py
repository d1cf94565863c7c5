"""A body model for the ``model`` read option tests (importable by Spark's workers)."""

from __future__ import annotations

from pydantic import BaseModel


class Order(BaseModel):
    n: int
    amount: int


from streamworker import App, Message  # noqa: E402

plain_app = App("plain")


@plain_app.handler("orders", group="g")
def plain(msg: Message) -> None:
    """An at-least-once handler: backfills refuse it."""

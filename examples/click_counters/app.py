"""Click counters, effectively once: every click on stream ``clicks`` counts once in Redis.

The handler reads nothing and writes nothing itself: it returns the Redis writes it wants as
``Effects``. streamworker applies them and XACKs the click in one Lua script, so a crash, a
redelivery or a claim race never counts a click twice. ``dedup_field="click_id"`` also drops a
click that a retrying producer XADDed twice (within ``dedup_window_ms``).

    streamworker run examples/click_counters/app.py:app
"""

from __future__ import annotations

from pydantic import BaseModel

from streamworker import App, Effects, Message

app = App("click-counters")

VIEWS = "{clicks}:views"  # hash: page -> clicks
TOTAL = "{clicks}:total"  # string: all clicks
TOP = "{clicks}:top-pages"  # sorted set: page -> clicks


def visitors(page: str) -> str:
    """The set of users who clicked on ``page``."""
    return f"{{clicks}}:visitors:{page}"


class Click(BaseModel):
    click_id: str
    page: str
    user: str


@app.handler(
    "clicks",
    group="counters",
    idempotency="lua",
    dedup_field="click_id",
    dedup_window_ms=3_600_000,
    batch_size=100,
)
def count(msg: Message[Click]) -> Effects:
    """Every key carries the stream's hash tag ``{clicks}``: one Redis Cluster slot."""
    click = msg.body
    return (
        Effects()
        .hincrby(VIEWS, click.page, 1)
        .sadd(visitors(click.page), click.user)
        .zincrby(TOP, 1, click.page)
        .incrby(TOTAL, 1)
    )

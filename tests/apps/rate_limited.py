"""A test App with a shared rate limit, run by ``streamworker run`` in a subprocess. Configured
by environment variables (this is user code, so reading the environment here is fine):

SW_TEST_STREAM, SW_TEST_GROUP    what to consume (default: jobs / g)
SW_TEST_LOG                      file: one line per handler start,
                                 "start <id> <n> <delivery_count> <consumer> <epoch s>", and
                                 "limited …" (same fields) when the handler raised RateLimited
SW_TEST_RATE                     rate_limit (default none: "")
SW_TEST_MAX_DELIVERIES           max_deliveries (default 5)
SW_TEST_BATCH                    batch_size (default 50)
SW_TEST_SLEEP_S                  seconds each message takes (default 0)
SW_TEST_SEEN_DIR                 a message with a field pause_ms raises RateLimited(pause_ms) the
                                 first time any worker sees it (a file created here marks it)
"""

from __future__ import annotations

import asyncio
import os
import time

from streamworker import App, Message, RateLimited
from tests.support.journal import append_record

app = App("rate-limited")

_LOG = os.environ.get("SW_TEST_LOG", "rate.log")
_SEEN = os.environ.get("SW_TEST_SEEN_DIR", ".")
_SLEEP = float(os.environ.get("SW_TEST_SLEEP_S", "0"))


def _record(line: str) -> None:
    # Its own line, whole (tests.support.journal); no fsync: nothing here is SIGKILLed.
    append_record(_LOG, line, fsync=False)


def _first_sight(msg: Message) -> bool:
    try:
        os.close(os.open(os.path.join(_SEEN, f"seen-{msg.id}"), os.O_CREAT | os.O_EXCL))
    except FileExistsError:
        return False
    return True


@app.handler(
    os.environ.get("SW_TEST_STREAM", "jobs"),
    group=os.environ.get("SW_TEST_GROUP", "g"),
    rate_limit=os.environ.get("SW_TEST_RATE") or None,
    max_deliveries=int(os.environ.get("SW_TEST_MAX_DELIVERIES", "5")),
    batch_size=int(os.environ.get("SW_TEST_BATCH", "50")),
    block_ms=200,
)
async def handle(msg: Message) -> None:
    now = time.time()
    what = f"{msg.id} {msg.fields.get('n', '')} {msg.delivery_count} {msg.consumer} {now:.6f}"
    pause_ms = msg.fields.get("pause_ms")
    if pause_ms and _first_sight(msg):
        _record(f"limited {what}")
        raise RateLimited(retry_after_ms=int(pause_ms))
    _record(f"start {what}")
    if _SLEEP:
        await asyncio.sleep(_SLEEP)

"""A test App run by ``streamworker run`` in a subprocess. Configured by environment variables
(this is user code, so reading the environment here is fine):

SW_TEST_STREAM, SW_TEST_GROUP    what to consume (default: orders / billing)
SW_TEST_LOG                      file: one line "start <id> <n> <delivery_count> <consumer>" /
                                 "done <id> <n>"
SW_TEST_SLEEP_S                  seconds each message takes (default 0)
SW_TEST_BATCH                    batch size (default 5)
SW_TEST_CLAIM_IDLE_MS            claim_idle_ms (default 60000)
SW_TEST_HOLD                     file: the first handler call waits until it exists (at most
                                 120 s), so the test decides when that batch goes on
SW_TEST_READ_AHEAD               "1": read_ahead=True
"""

from __future__ import annotations

import asyncio
import os

from streamworker import App, Message
from tests.support.journal import append_record

app = App("recorder")

_LOG = os.environ.get("SW_TEST_LOG", "recorder.log")
_SLEEP = float(os.environ.get("SW_TEST_SLEEP_S", "0"))
_HOLD = os.environ.get("SW_TEST_HOLD")
_held: list[bool] = []


def _record(line: str) -> None:
    # Whole even when this process is SIGKILLed mid-write (tests.support.journal).
    append_record(_LOG, line)


def _go(path: str) -> bool:
    return os.path.exists(path)


@app.handler(
    os.environ.get("SW_TEST_STREAM", "orders"),
    group=os.environ.get("SW_TEST_GROUP", "billing"),
    batch_size=int(os.environ.get("SW_TEST_BATCH", "5")),
    block_ms=200,
    claim_idle_ms=int(os.environ.get("SW_TEST_CLAIM_IDLE_MS", "60000")),
    read_ahead=os.environ.get("SW_TEST_READ_AHEAD") == "1",
)
async def record(msg: Message) -> None:
    _record(f"start {msg.id} {msg.fields.get('n', '')} {msg.delivery_count} {msg.consumer}")
    if _HOLD is not None and not _held:
        _held.append(True)
        for _ in range(6000):
            if _go(_HOLD):
                break
            await asyncio.sleep(0.02)
    if _SLEEP:
        await asyncio.sleep(_SLEEP)
    _record(f"done {msg.id} {msg.fields.get('n', '')}")

"""Blocking XREAD / XREADGROUP on the engine: who gets served, with what, and Redis 7.0's
error replies for deleted keys and destroyed groups."""

from __future__ import annotations

import threading
import time
from typing import Any

import pytest

from streamworker.engine import Engine
from streamworker.engine.context import Blocked, ClientState
from streamworker.engine.errors import CommandError
from streamworker.engine.replies import NULL_ARRAY, Map
from tests.support.waiting import wait_until


class C:
    """An engine client."""

    def __init__(self, engine: Engine) -> None:
        self.engine = engine
        self.client: ClientState = engine.connect()

    def __call__(self, *args: str) -> Any:
        return self.engine.execute(self.client, [a.encode() for a in args])


@pytest.fixture
def engine() -> Engine:
    return Engine()


@pytest.fixture
def a(engine: Engine) -> C:
    return C(engine)


@pytest.fixture
def b(engine: Engine) -> C:
    return C(engine)


def _blocked(reply: Any) -> Blocked:
    assert isinstance(reply, Blocked), reply
    return reply


def test_xread_block_is_served_by_xadd(a: C, b: C) -> None:
    a("XADD", "s", "1-0", "f", "v")
    w = _blocked(b("XREAD", "BLOCK", "0", "STREAMS", "s", "$"))
    a("XADD", "s", "2-0", "f", "w")
    assert w.reply == [[b"s", [[b"2-0", [b"f", b"w"]]]]]


def test_xread_block_on_a_missing_key_waits_from_zero(a: C, b: C) -> None:
    w = _blocked(b("XREAD", "BLOCK", "0", "STREAMS", "s", "$"))
    a("XADD", "s", "1-0", "f", "v")
    assert w.reply == [[b"s", [[b"1-0", [b"f", b"v"]]]]]


def test_served_reply_names_only_the_stream_that_got_data(a: C, b: C) -> None:
    w = _blocked(b("XREAD", "BLOCK", "0", "STREAMS", "s", "t", "$", "$"))
    a("XADD", "t", "1-0", "f", "v")
    assert w.reply == [[b"t", [[b"1-0", [b"f", b"v"]]]]]


def test_resp3_served_reply_is_a_map(a: C, b: C) -> None:
    b("HELLO", "3")
    w = _blocked(b("XREAD", "BLOCK", "0", "STREAMS", "s", "$"))
    a("XADD", "s", "1-0", "f", "v")
    assert w.reply == Map([(b"s", [[b"1-0", [b"f", b"v"]]])])


def test_served_without_count_is_capped_at_1000(a: C, b: C) -> None:
    w = _blocked(b("XREAD", "BLOCK", "0", "STREAMS", "s", "$"))
    a("MULTI")
    for i in range(1, 1201):
        a("XADD", "s", f"{i}-0", "f", "v")
    a("EXEC")
    assert len(w.reply[0][1]) == 1000  # type: ignore[index]


def test_served_with_count_uses_it(a: C, b: C) -> None:
    w = _blocked(b("XREAD", "COUNT", "2", "BLOCK", "0", "STREAMS", "s", "$"))
    a("MULTI")
    for i in range(1, 6):
        a("XADD", "s", f"{i}-0", "f", "v")
    a("EXEC")
    assert len(w.reply[0][1]) == 2  # type: ignore[index]


def test_xread_stays_blocked_across_del_and_type_change(a: C, b: C) -> None:
    a("XADD", "s", "1-0", "f", "v")
    w = _blocked(b("XREAD", "BLOCK", "0", "STREAMS", "s", "$"))
    a("DEL", "s")
    a("SET", "s", "x")
    assert not w.resolved
    a("DEL", "s")
    a("XADD", "s", "5-0", "f", "v")
    assert w.reply == [[b"s", [[b"5-0", [b"f", b"v"]]]]]


def test_xreadgroup_block_gets_unblocked_error_when_the_key_is_deleted(a: C, b: C) -> None:
    a("XGROUP", "CREATE", "s", "g", "$", "MKSTREAM")
    w = _blocked(b("XREADGROUP", "GROUP", "g", "c", "BLOCK", "0", "STREAMS", "s", ">"))
    a("DEL", "s")
    assert w.reply == CommandError("UNBLOCKED the stream key no longer exists")


def test_xreadgroup_block_gets_nogroup_when_the_group_is_destroyed(a: C, b: C) -> None:
    a("XGROUP", "CREATE", "s", "g", "$", "MKSTREAM")
    w = _blocked(b("XREADGROUP", "GROUP", "g", "c", "BLOCK", "0", "STREAMS", "s", ">"))
    a("XGROUP", "DESTROY", "s", "g")
    assert w.reply == CommandError(
        "NOGROUP the consumer group this client was blocked on no longer exists"
    )


def test_xreadgroup_block_served_creates_consumer_and_pending(a: C, b: C) -> None:
    a("XGROUP", "CREATE", "s", "g", "$", "MKSTREAM")
    w = _blocked(b("XREADGROUP", "GROUP", "g", "c", "BLOCK", "0", "STREAMS", "s", ">"))
    assert a("XINFO", "CONSUMERS", "s", "g") == []
    a("XADD", "s", "1-0", "f", "v")
    assert w.reply == [[b"s", [[b"1-0", [b"f", b"v"]]]]]
    assert a("XPENDING", "s", "g")[3] == [[b"c", b"1"]]


def test_xreadgroup_noack_block_leaves_no_pending(a: C, b: C) -> None:
    a("XGROUP", "CREATE", "s", "g", "$", "MKSTREAM")
    w = _blocked(b("XREADGROUP", "GROUP", "g", "c", "NOACK", "BLOCK", "0", "STREAMS", "s", ">"))
    a("XADD", "s", "1-0", "f", "v")
    assert w.resolved
    assert a("XPENDING", "s", "g")[0] == 0


def test_blocked_readers_of_one_group_are_served_in_order(engine: Engine, a: C, b: C) -> None:
    c = C(engine)
    a("XGROUP", "CREATE", "s", "g", "$", "MKSTREAM")
    first = _blocked(b("XREADGROUP", "GROUP", "g", "b", "BLOCK", "0", "STREAMS", "s", ">"))
    second = _blocked(c("XREADGROUP", "GROUP", "g", "c", "BLOCK", "0", "STREAMS", "s", ">"))
    a("XADD", "s", "1-0", "f", "v")
    assert first.resolved
    assert not second.resolved
    a("XADD", "s", "2-0", "f", "v")
    assert second.reply == [[b"s", [[b"2-0", [b"f", b"v"]]]]]


def test_xadd_then_xdel_in_one_transaction_serves_an_empty_list(a: C, b: C) -> None:
    # Redis compares with the last generated ID, not the last live entry.
    a("XADD", "s", "1-0", "f", "v")
    w = _blocked(b("XREAD", "BLOCK", "0", "STREAMS", "s", "$"))
    a("MULTI")
    a("XADD", "s", "2-0", "f", "v")
    a("XDEL", "s", "2-0")
    a("EXEC")
    assert w.reply == [[b"s", []]]


def test_block_inside_multi_runs_as_non_blocking(a: C) -> None:
    a("XGROUP", "CREATE", "s", "g", "$", "MKSTREAM")
    a("MULTI")
    a("XREAD", "BLOCK", "0", "STREAMS", "s", "$")
    a("XREADGROUP", "GROUP", "g", "c", "BLOCK", "0", "STREAMS", "s", ">")
    assert a("EXEC") == [NULL_ARRAY, NULL_ARRAY]


def test_xreadgroup_block_inside_scripts_is_refused(a: C) -> None:
    a.client.ctx.in_script = True
    try:
        reply = a("XREADGROUP", "GROUP", "g", "c", "BLOCK", "0", "STREAMS", "s", ">")
    finally:
        a.client.ctx.in_script = False
    assert reply == CommandError(
        "ERR XREADGROUP command is not allowed with BLOCK option from scripts"
    )


def test_block_timeout_replies_a_null_array(engine: Engine, b: C) -> None:
    w = _blocked(b("XREAD", "BLOCK", "20", "STREAMS", "s", "$"))
    start = time.monotonic()
    assert engine.wait(w) is NULL_ARRAY
    assert time.monotonic() - start >= 0.015


def test_a_thread_blocked_in_wait_is_woken_by_another_thread(engine: Engine, a: C, b: C) -> None:
    w = _blocked(b("XREAD", "BLOCK", "0", "STREAMS", "s", "$"))
    got: list[Any] = []
    t = threading.Thread(target=lambda: got.append(engine.wait(w, timeout_s=5)))
    t.start()
    # wait() has taken the entry's event (private): the XADD below must wake it, not precede it.
    wait_until(lambda: w._event is not None, timeout_s=5, what="the thread to wait")
    a("XADD", "s", "1-0", "f", "v")
    t.join(5)
    assert got == [[[b"s", [[b"1-0", [b"f", b"v"]]]]]]

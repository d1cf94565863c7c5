"""core.py: dispatch, rejections, pipelines, blocking waiter queues and their wake-ups."""

from __future__ import annotations

import threading
import time

import pytest

from streamworker.engine import Engine
from streamworker.engine.commands import CommandSpec
from streamworker.engine.context import Blocked, Ctx
from streamworker.engine.errors import CommandError
from streamworker.engine.replies import NULL_BULK, OK, QUEUED, Reply
from tests.engine.conftest import Exec


def _install_take(engine: Engine) -> None:
    """TAKE key timeout_ms: pop a string value left by PUT, blocking until there is one."""

    def take(ctx: Ctx, args: list[bytes]) -> Reply | Blocked:
        key = args[0]

        def attempt(c: Ctx) -> Reply | None:
            value = c.db.get(key)
            if value is None:
                return None
            c.db.delete(key)
            return value

        got = attempt(ctx)
        if got is not None:
            return got
        return ctx.block([key], int(args[1]), attempt, NULL_BULK)

    def put(ctx: Ctx, args: list[bytes]) -> Reply:
        ctx.db.set(args[0], args[1])
        ctx.signal_key_ready(args[0])
        return OK

    engine.table[b"take"] = CommandSpec("take", take, 3)
    engine.table[b"put"] = CommandSpec("put", put, 3)


@pytest.fixture
def beng() -> Engine:
    engine = Engine()
    _install_take(engine)
    return engine


def test_command_names_are_case_insensitive(ex: Exec) -> None:
    assert ex("sEt", "k", "v") == OK
    assert ex("get", "k") == b"v"


def test_arity_is_checked_before_the_command_runs(ex: Exec) -> None:
    assert ex("GET") == CommandError("ERR wrong number of arguments for 'get' command")


def test_unknown_command_text_replaces_newlines(ex: Exec) -> None:
    reply = ex("BAD\r\nCMD", "a\nb")
    assert reply == CommandError("ERR unknown command 'BAD  CMD', with args beginning with: 'a b' ")


def test_empty_command_is_an_unknown_command(engine: Engine) -> None:
    client = engine.connect()
    assert isinstance(engine.execute(client, []), CommandError)


def test_execute_many_runs_a_pipeline_in_order(engine: Engine) -> None:
    client = engine.connect()
    out = engine.execute_many(client, [[b"SET", b"k", b"1"], [b"INCR", b"k"], [b"GET", b"k"]])
    assert out == [OK, 2, b"2"]


def test_execute_many_inside_multi_returns_queued(engine: Engine) -> None:
    client = engine.connect()
    out = engine.execute_many(client, [[b"MULTI"], [b"SET", b"k", b"1"], [b"EXEC"]])
    assert out == [OK, QUEUED, [OK]]


def test_unexpected_command_errors_keep_the_client_usable(ex: Exec) -> None:
    ex("SET", "s", "text")
    assert isinstance(ex("INCR", "s"), CommandError)
    assert ex("PING").text == "PONG"


def test_blocked_command_returns_blocked(beng: Engine) -> None:
    client = beng.connect()
    blocked = beng.execute(client, [b"TAKE", b"k", b"0"])
    assert isinstance(blocked, Blocked)
    assert not blocked.resolved
    assert client.blocked is blocked


def test_signal_serves_the_blocked_client(beng: Engine) -> None:
    a, b = beng.connect(), beng.connect()
    blocked = beng.execute(a, [b"TAKE", b"k", b"0"])
    assert beng.execute(b, [b"PUT", b"k", b"v"]) == OK
    assert blocked.resolved
    assert blocked.reply == b"v"
    assert a.blocked is None


def test_waiters_are_served_in_fifo_order(beng: Engine) -> None:
    clients = [beng.connect() for _ in range(3)]
    blocked = [beng.execute(c, [b"TAKE", b"k", b"0"]) for c in clients]
    producer = beng.connect()
    for i in range(3):
        beng.execute(producer, [b"PUT", b"k", b"v%d" % i])
    assert [b.reply for b in blocked] == [b"v0", b"v1", b"v2"]


def test_only_the_first_waiter_gets_a_single_value(beng: Engine) -> None:
    first = beng.execute(beng.connect(), [b"TAKE", b"k", b"0"])
    second = beng.execute(beng.connect(), [b"TAKE", b"k", b"0"])
    beng.execute(beng.connect(), [b"PUT", b"k", b"v"])
    assert first.reply == b"v"
    assert not second.resolved


def test_wait_returns_the_timeout_reply_after_the_deadline(beng: Engine) -> None:
    blocked = beng.execute(beng.connect(), [b"TAKE", b"k", b"50"])
    start = time.monotonic()
    assert beng.wait(blocked) is NULL_BULK
    assert time.monotonic() - start >= 0.05


def test_timed_out_waiter_leaves_the_queue(beng: Engine) -> None:
    a = beng.connect()
    blocked = beng.execute(a, [b"TAKE", b"k", b"10"])
    beng.wait(blocked)
    beng.execute(beng.connect(), [b"PUT", b"k", b"v"])
    assert blocked.reply is NULL_BULK
    assert beng.execute(a, [b"GET", b"k"]) == b"v"


def test_wait_with_a_shorter_cap_leaves_the_command_blocked(beng: Engine) -> None:
    blocked = beng.execute(beng.connect(), [b"TAKE", b"k", b"0"])
    assert beng.wait(blocked, 0.02) is None
    assert not blocked.resolved


def test_another_thread_wakes_a_waiting_thread(beng: Engine) -> None:
    blocked = beng.execute(beng.connect(), [b"TAKE", b"k", b"5000"])
    producer = beng.connect()
    timer = threading.Timer(0.05, beng.execute, (producer, [b"PUT", b"k", b"v"]))
    timer.start()
    start = time.monotonic()
    assert beng.wait(blocked) == b"v"
    assert time.monotonic() - start < 2
    timer.join()


def test_many_threads_each_get_one_value(beng: Engine) -> None:
    n = 8
    results: list[Reply | None] = [None] * n

    def worker(i: int) -> None:
        blocked = beng.execute(beng.connect(), [b"TAKE", b"k", b"5000"])
        results[i] = beng.wait(blocked) if isinstance(blocked, Blocked) else blocked

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(n)]
    for t in threads:
        t.start()
    producer = beng.connect()
    deadline = time.monotonic() + 5
    sent = 0
    while sent < n and time.monotonic() < deadline:
        if beng.execute(producer, [b"EXISTS", b"k"]) == 0:
            beng.execute(producer, [b"PUT", b"k", b"v%d" % sent])
            sent += 1
        time.sleep(0.001)
    for t in threads:
        t.join(5)
    assert sorted(results) == sorted(b"v%d" % i for i in range(n))  # type: ignore[type-var]


def test_disconnect_removes_the_waiter(beng: Engine) -> None:
    a = beng.connect()
    beng.execute(a, [b"TAKE", b"k", b"0"])
    beng.disconnect(a)
    waiting = beng.connect()
    blocked = beng.execute(waiting, [b"TAKE", b"k", b"0"])
    beng.execute(beng.connect(), [b"PUT", b"k", b"v"])
    assert blocked.reply == b"v"


def test_done_callback_runs_on_resolution(beng: Engine) -> None:
    blocked = beng.execute(beng.connect(), [b"TAKE", b"k", b"0"])
    seen: list[Reply] = []
    with beng.lock:
        blocked.add_done_callback(lambda b: seen.append(b.reply))
    beng.execute(beng.connect(), [b"PUT", b"k", b"v"])
    assert seen == [b"v"]


def test_client_unblock_timeout_gives_the_timeout_reply(beng: Engine) -> None:
    a = beng.connect()
    blocked = beng.execute(a, [b"TAKE", b"k", b"0"])
    other = beng.connect()
    assert beng.execute(other, [b"CLIENT", b"UNBLOCK", str(a.id).encode()]) == 1
    assert blocked.reply is NULL_BULK
    assert beng.execute(other, [b"CLIENT", b"UNBLOCK", str(a.id).encode()]) == 0


def test_client_unblock_error_gives_unblocked_error(beng: Engine) -> None:
    a = beng.connect()
    blocked = beng.execute(a, [b"TAKE", b"k", b"0"])
    beng.execute(beng.connect(), [b"CLIENT", b"UNBLOCK", str(a.id).encode(), b"ERROR"])
    assert blocked.reply == CommandError("UNBLOCKED client unblocked via CLIENT UNBLOCK")


def test_execute_many_stops_at_a_blocked_command(beng: Engine) -> None:
    client = beng.connect()
    out = beng.execute_many(
        client, [[b"SET", b"a", b"1"], [b"TAKE", b"k", b"0"], [b"SET", b"b", b"1"]]
    )
    assert len(out) == 2
    assert isinstance(out[1], Blocked)
    assert beng.execute(beng.connect(), [b"EXISTS", b"b"]) == 0


def test_deleting_a_key_signals_its_waiters(engine: Engine) -> None:
    calls: list[bytes] = []

    def watch(ctx: Ctx, args: list[bytes]) -> Reply | Blocked:
        def attempt(c: Ctx) -> Reply | None:
            calls.append(b"retry")
            return None if c.db.exists(args[0]) else b"gone"

        return ctx.block([args[0]], 0, attempt, NULL_BULK)

    engine.table[b"watchgone"] = CommandSpec("watchgone", watch, 2)
    engine.execute(engine.connect(), [b"SET", b"k", b"v"])
    blocked = engine.execute(engine.connect(), [b"WATCHGONE", b"k"])
    engine.execute(engine.connect(), [b"DEL", b"k"])
    assert blocked.reply == b"gone"


def test_blocking_in_another_db_uses_that_db(beng: Engine) -> None:
    a = beng.connect()
    beng.execute(a, [b"SELECT", b"2"])
    blocked = beng.execute(a, [b"TAKE", b"k", b"0"])
    b = beng.connect()
    beng.execute(b, [b"PUT", b"k", b"db0"])
    assert not blocked.resolved
    beng.execute(b, [b"SELECT", b"2"])
    beng.execute(b, [b"PUT", b"k", b"db2"])
    assert blocked.reply == b"db2"


def test_a_crashing_command_becomes_an_error_reply_without_the_exception_text(
    engine: Engine,
) -> None:
    def boom(ctx: Ctx, args: list[bytes]) -> Reply:
        raise ZeroDivisionError("secret 42")

    engine.table[b"boom"] = CommandSpec("boom", boom, 1)
    reply = engine.execute(engine.connect(), [b"BOOM"])
    assert reply == CommandError("ERR engine internal error in 'boom' (details in the server log)")


def test_a_crashing_waiter_does_not_fail_the_command_that_served_it(beng: Engine) -> None:
    def bad(ctx: Ctx, args: list[bytes]) -> Reply | Blocked:
        def attempt(c: Ctx) -> Reply | None:
            raise RuntimeError("bug")

        return ctx.block([args[0]], 0, attempt, NULL_BULK)

    beng.table[b"bad"] = CommandSpec("bad", bad, 2)
    blocked = beng.execute(beng.connect(), [b"BAD", b"k"])
    assert beng.execute(beng.connect(), [b"PUT", b"k", b"v"]) == OK
    assert isinstance(blocked.reply, CommandError)

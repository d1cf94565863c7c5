"""Helpers for the persistence tests: run commands on an engine, dump its whole state."""

from __future__ import annotations

import random
from typing import Any

from streamworker.engine import Engine
from streamworker.engine.context import Blocked, ClientState
from streamworker.engine.errors import CommandError
from streamworker.engine.protocol import encode
from streamworker.engine.replies import Map


def argv_of(args: tuple[Any, ...]) -> list[bytes]:
    return [a if isinstance(a, bytes) else str(a).encode() for a in args]


class Session:
    """One client of an in-process engine: ``s("XADD", "k", "*", "f", "v")`` -> reply."""

    def __init__(self, engine: Engine) -> None:
        self.engine = engine
        self.client: ClientState = engine.connect()

    def __call__(self, *args: Any) -> Any:
        reply = self.engine.execute(self.client, argv_of(args))
        if isinstance(reply, Blocked):
            reply = self.engine.wait(reply)
        return reply


def _strip_layout(reply: Any) -> Any:
    # radix-tree-keys / radix-tree-nodes describe the node layout, which a rewrite rebuilds.
    if isinstance(reply, Map):
        return Map(
            (k, v) for k, v in reply.items if k not in (b"radix-tree-keys", b"radix-tree-nodes")
        )
    return reply


def dump_state(engine: Engine) -> dict[tuple[int, bytes], Any]:
    """Every key of every database: type, absolute expiry and full contents; streams as
    XINFO STREAM FULL (all entries, groups, consumers and PEL) without the layout fields."""
    s = Session(engine)
    out: dict[tuple[int, bytes], Any] = {}
    for db in range(16):
        s("SELECT", db)
        for key in sorted(s("KEYS", "*")):
            kind = s("TYPE", key).text
            expiry = s("PEXPIRETIME", key)
            if kind == "string":
                value: Any = s("GET", key)
            elif kind == "hash":
                value = sorted(s("HGETALL", key).items)
            elif kind == "set":
                value = sorted(s("SMEMBERS", key).items)
            elif kind == "zset":
                value = encode(s("ZRANGE", key, 0, -1, "WITHSCORES"), 3)
            elif kind == "list":
                value = s("LRANGE", key, 0, -1)
            elif kind == "stream":
                value = encode(_strip_layout(s("XINFO", "STREAM", key, "FULL", "COUNT", 0)), 3)
            else:
                raise AssertionError(f"unexpected type {kind}")
            out[(db, key)] = (kind, expiry, value)
    engine.disconnect(s.client)
    return out


def random_workload(s: Session, rnd: random.Random, steps: int) -> None:
    """A mix of every write the engine logs specially (streams first of all), with errors
    allowed (they must not be logged)."""
    streams = [b"s1", b"s2", b"s3"]
    groups = [b"g1", b"g2"]
    consumers = [b"c1", b"c2", b"c3"]
    for _ in range(steps):
        key = rnd.choice(streams)
        g = rnd.choice(groups)
        c = rnd.choice(consumers)
        op = rnd.randrange(28)
        if op < 6:
            trim: list[Any] = []
            if rnd.random() < 0.2:
                trim = ["MAXLEN", rnd.choice(["~", "="]), rnd.randrange(0, 30)]
            elif rnd.random() < 0.1:
                trim = ["MINID", "~", "0-1"]
            s("XADD", key, *trim, "*", "f", rnd.randrange(1000), "g", "x" * rnd.randrange(5))
        elif op == 6:
            s("XGROUP", "CREATE", key, g, rnd.choice(["0", "$"]), "MKSTREAM")
        elif op in (7, 8, 9):
            s("XREADGROUP", "GROUP", g, c, "COUNT", rnd.randrange(1, 6), "STREAMS", key, ">")
        elif op == 10:
            s("XREADGROUP", "GROUP", g, c, "NOACK", "COUNT", 2, "STREAMS", key, ">")
        elif op == 11:
            s("XREADGROUP", "GROUP", g, c, "COUNT", 3, "STREAMS", key, "0")
        elif op in (12, 13):
            pending = s("XPENDING", key, g, "-", "+", 10)
            if isinstance(pending, list) and pending:
                ids = [p[0] for p in rnd.sample(pending, rnd.randrange(1, len(pending) + 1))]
                s("XACK", key, g, *ids)
        elif op == 14:
            entries = s("XRANGE", key, "-", "+", "COUNT", 20)
            if isinstance(entries, list) and entries:
                s("XDEL", key, rnd.choice(entries)[0])
        elif op == 15:
            pending = s("XPENDING", key, g, "-", "+", 10)
            if isinstance(pending, list) and pending:
                opts = rnd.choice(
                    [[], ["JUSTID"], ["RETRYCOUNT", 7], ["IDLE", 5], ["TIME", 1], ["FORCE"]]
                )
                s("XCLAIM", key, g, c, 0, pending[0][0], *opts)
        elif op == 16:
            s("XAUTOCLAIM", key, g, c, 0, "0", "COUNT", rnd.randrange(1, 4))
        elif op == 17:
            s("XTRIM", key, "MAXLEN", rnd.choice(["~", "="]), rnd.randrange(0, 20))
        elif op == 18:
            s("XGROUP", "SETID", key, g, rnd.choice(["0", "$"]))
        elif op == 19:
            s("XGROUP", "CREATECONSUMER", key, g, c)
        elif op == 20:
            s("XGROUP", "DELCONSUMER", key, g, c)
        elif op == 21 and rnd.random() < 0.2:
            s("XGROUP", "DESTROY", key, g)
        elif op == 22:
            s("SET", b"str%d" % rnd.randrange(5), rnd.randrange(100), "EX", rnd.randrange(50, 500))
            s("INCRBYFLOAT", b"float", "0.1")
        elif op == 23:
            s("HSET", b"h", b"f%d" % rnd.randrange(5), rnd.randrange(100))
            s("HINCRBYFLOAT", b"h", b"ff", "1.5")
            s("SADD", b"set", *(rnd.randrange(20) for _ in range(3)))
            s("SPOP", b"set")
        elif op == 24:
            s("ZADD", b"z", rnd.random() * 10, b"m%d" % rnd.randrange(5))
            s("RPUSH", b"l", rnd.randrange(9))
            s("LPOP", b"l")
        elif op == 25:
            s("MULTI")
            s("SET", b"tx", rnd.randrange(9))
            s("XADD", key, "*", "tx", "1")
            s("EXPIRE", b"tx", 1000)
            s("EXEC")
        elif op == 26:
            s("SELECT", rnd.randrange(3))
            s("SET", b"dbkey", rnd.randrange(9), "PX", 100000)
            s("SELECT", 0)
        else:
            result = s("XINFO", "STREAM", key)
            if not isinstance(result, CommandError) and rnd.random() < 0.3:
                s("XSETID", key, "999999999999999-0", "ENTRIESADDED", 999999)

"""Sorted sets: the model and the commands, against redis-server 7.0."""

from __future__ import annotations

import random

import pytest

from streamworker.engine.model.zset import LexBound, ScoreBound, ZSet
from streamworker.engine.replies import NULL_BULK, Double
from tests.engine.conftest import Differ, Exec, cmds, run_script


def test_zset_orders_by_score_then_member_bytes() -> None:
    z = ZSet()
    z.add(b"b", 1.0)
    z.add(b"a", 1.0)
    z.add(b"c", 0.5)
    assert [m for _, m in z] == [b"c", b"a", b"b"]


def test_zset_update_moves_the_member() -> None:
    z = ZSet()
    z.add(b"a", 1.0)
    z.add(b"b", 2.0)
    assert z.add(b"a", 3.0) is False
    assert z.rank(b"a") == 1


def test_zset_score_range_handles_exclusive_and_infinite_bounds() -> None:
    z = ZSet()
    for i, m in enumerate([b"a", b"b", b"c", b"d"]):
        z.add(m, float(i))
    assert z.score_range(ScoreBound(1.0, True), ScoreBound(3.0)) == (2, 4)
    assert z.score_range(ScoreBound(float("-inf")), ScoreBound(float("inf"))) == (0, 4)
    assert z.score_range(ScoreBound(2.0, True), ScoreBound(2.0)) == (0, 0)


def test_zset_lex_range_with_open_ends() -> None:
    z = ZSet()
    for m in [b"a", b"b", b"c"]:
        z.add(m, 0.0)
    assert z.lex_range(LexBound(b"", True, -1), LexBound(b"b", True)) == (0, 1)
    assert z.lex_range(LexBound(b"b", False), LexBound(b"", True, 1)) == (1, 3)


def test_zset_rank_agrees_with_sorted_order_after_random_updates() -> None:
    rng = random.Random(7)
    z = ZSet()
    ref: dict[bytes, float] = {}
    for _ in range(2000):
        m = b"m%d" % rng.randrange(200)
        if rng.random() < 0.2:
            z.remove(m)
            ref.pop(m, None)
        else:
            s = float(rng.randrange(50))
            z.add(m, s)
            ref[m] = s
    expected = sorted((s, m) for m, s in ref.items())
    assert list(z) == expected
    for i, (_, m) in enumerate(expected):
        assert z.rank(m) == i


def test_zscore_is_a_double_reply(ex: Exec) -> None:
    ex("ZADD", "z", "1.5", "a")
    assert ex("ZSCORE", "z", "a") == Double(1.5)
    assert ex("ZSCORE", "z", "nomember") is NULL_BULK


def test_zadd_incr_returns_the_new_score(ex: Exec) -> None:
    ex("ZADD", "z", "1", "a")
    assert ex("ZADD", "z", "INCR", "2", "a") == Double(3.0)


SCRIPTS = {
    "zadd_flags_and_counts": """
        ZADD z 1 a 2 b
        ZADD z 1 a 3 c
        ZADD z CH 5 a 3 c 4 d
        ZADD z NX 10 a 10 e
        ZADD z XX 20 a 20 nomember
        ZADD z XX CH 21 a
        ZADD z GT 1 a
        ZADD z GT CH 30 a
        ZADD z LT CH 40 a
        ZADD z LT CH 1 a
        ZADD z GT 100 newmember
        ZRANGE z 0 -1 WITHSCORES
        ZCARD z
    """,
    "zadd_errors": """
        ZADD z
        ZADD z 1
        ZADD z 1 a 2
        ZADD z NX XX 1 a
        ZADD z NX GT 1 a
        ZADD z GT LT 1 a
        ZADD z INCR 1 a 2 b
        ZADD z abc a
        ZADD z nan a
        ZADD z 1 a FOO
        ZADD z CH
        SET s v
        ZADD s 1 a
        ZADD z XX 1 a
        EXISTS z
    """,
    "zadd_incr_and_zincrby": """
        ZADD z INCR 1 a
        ZADD z INCR 1.5 a
        ZADD z INCR NX 1 a
        ZADD z INCR XX 1 nomember
        ZADD z INCR GT -1 a
        ZINCRBY z 2 a
        ZINCRBY z abc a
        ZINCRBY z inf b
        ZINCRBY z -inf b
        ZINCRBY z 0.1 c
        ZINCRBY z 0.2 c
        ZSCORE z c
        ZADD nk XX INCR 1 a
    """,
    "score_formatting": """
        ZADD z 1.1 a 0.1 b -0 c 1e100 d inf e -inf f 3.0 g 1e-7 h 123456789012345678 i
        ZRANGE z 0 -1 WITHSCORES
        ZSCORE z a
        ZSCORE z c
        ZMSCORE z a b nomember e f
        ZMSCORE nokey a
        ZSCORE nokey a
    """,
    "zrange_by_rank": """
        ZADD z 1 a 2 b 3 c 4 d
        ZRANGE z 0 -1
        ZRANGE z 1 2 WITHSCORES
        ZRANGE z -2 -1
        ZRANGE z 2 1
        ZRANGE z 5 10
        ZRANGE z -100 100
        ZRANGE z 0 -1 REV
        ZRANGE z 0 1 REV WITHSCORES
        ZREVRANGE z 0 1
        ZREVRANGE z 0 -1 WITHSCORES
        ZRANGE z a 1
        ZRANGE nokey 0 -1
        ZRANGE z 0 -1 LIMIT 0 1
        ZRANGE z 0 -1 LIMIT 0 -1
        ZRANGE z 0 -1 FOO
    """,
    "zrange_by_score": """
        ZADD z 1 a 2 b 3 c 4 d 5 e
        ZRANGEBYSCORE z 2 4
        ZRANGEBYSCORE z (2 4
        ZRANGEBYSCORE z (2 (4
        ZRANGEBYSCORE z -inf +inf WITHSCORES
        ZRANGEBYSCORE z 4 2
        ZRANGEBYSCORE z (3 (3
        ZRANGEBYSCORE z 3 3
        ZRANGEBYSCORE z -inf +inf LIMIT 1 2
        ZRANGEBYSCORE z -inf +inf LIMIT 1 -1
        ZRANGEBYSCORE z -inf +inf LIMIT -1 2
        ZRANGEBYSCORE z -inf +inf LIMIT 10 2
        ZRANGEBYSCORE z -inf +inf LIMIT 0 0
        ZREVRANGEBYSCORE z 4 2
        ZREVRANGEBYSCORE z +inf -inf LIMIT 1 2 WITHSCORES
        ZRANGE z 2 4 BYSCORE
        ZRANGE z 4 2 BYSCORE REV LIMIT 0 2
        ZRANGE z (1 +inf BYSCORE LIMIT 1 10 WITHSCORES
        ZRANGEBYSCORE z abc 2
        ZRANGEBYSCORE z 1 ((2
        ZRANGEBYSCORE z "" 2
        ZRANGEBYSCORE z ( 2
        ZRANGEBYSCORE z " 1" 2
        ZRANGEBYSCORE z 1 2 REV
        ZRANGEBYSCORE z 1 2 LIMIT 1
        ZRANGEBYSCORE z 1 2 LIMIT a b
        ZRANGEBYSCORE nokey 1 2
    """,
    "zrange_by_lex": """
        ZADD z 0 a 0 b 0 c 0 d 0 e
        ZRANGEBYLEX z - +
        ZRANGEBYLEX z [b (d
        ZRANGEBYLEX z (b [d
        ZRANGEBYLEX z [c [a
        ZRANGEBYLEX z - + LIMIT 1 2
        ZREVRANGEBYLEX z + -
        ZREVRANGEBYLEX z [d [b LIMIT 1 5
        ZRANGE z [b [d BYLEX
        ZRANGE z [d [b BYLEX REV
        ZRANGE z - + BYLEX WITHSCORES
        ZRANGEBYLEX z b d
        ZRANGEBYLEX z +a -
        ZLEXCOUNT z [b +
        ZLEXCOUNT z - +
        ZLEXCOUNT z x y
        ZLEXCOUNT nokey - +
    """,
    "zrank_zcount_zrem": """
        ZADD z 1 a 2 b 3 c
        ZRANK z a
        ZRANK z c
        ZRANK z nomember
        ZRANK nokey a
        ZREVRANK z a
        ZCOUNT z 1 2
        ZCOUNT z (1 +inf
        ZCOUNT z abc 1
        ZCOUNT nokey 1 2
        ZREM z a nomember
        ZREM z b c
        EXISTS z
        ZREM nokey a
        ZCARD nokey
    """,
    "zremrange_family": """
        ZADD z 1 a 2 b 3 c 4 d 5 e
        ZREMRANGEBYSCORE z 2 3
        ZRANGE z 0 -1
        ZREMRANGEBYSCORE z abc 3
        ZREMRANGEBYRANK z 0 0
        ZREMRANGEBYRANK z 5 10
        ZREMRANGEBYRANK z -1 -1
        ZRANGE z 0 -1
        ZREMRANGEBYRANK z a 1
        ZREMRANGEBYRANK z 0 -1
        EXISTS z
        ZREMRANGEBYSCORE nokey 1 2
        ZADD l 0 a 0 b 0 c
        ZREMRANGEBYLEX l [a (c
        ZRANGE l 0 -1
        ZREMRANGEBYLEX l x y
    """,
    "zpop": """
        ZADD z 1 a 2 b 3 c
        ZPOPMIN z
        ZPOPMAX z
        ZPOPMIN z 5
        ZPOPMIN nokey
        ZPOPMIN nokey 2
        ZADD z 1 a 2 b
        ZPOPMAX z 1
        ZPOPMIN z -1
        ZPOPMIN z 0
        ZPOPMIN z 1 2
    """,
    "zset_wrongtype": """
        SET s v
        ZADD s 1 a
        ZSCORE s a
        ZMSCORE s a
        ZRANGE s 0 -1
        ZRANGEBYSCORE s 1 2
        ZRANGEBYSCORE s abc 2
        ZRANK s a
        ZCARD s
        ZCOUNT s 1 2
        ZREM s a
        ZINCRBY s 1 a
    """,
}


@pytest.mark.redis
@pytest.mark.parametrize("resp", [2, 3])
@pytest.mark.parametrize("name", list(SCRIPTS))
def test_zsets_match_redis(differ: Differ, name: str, resp: int) -> None:
    run_script(differ, cmds(SCRIPTS[name]), resp)

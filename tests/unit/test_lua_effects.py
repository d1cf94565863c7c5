"""The Effects builder: what each method records, and the arguments it refuses at build time."""

from __future__ import annotations

import datetime
import math

import pytest

from streamworker import Effects
from streamworker.core.effects import Effect, EffectError
from streamworker.idempotency.lua import effects_of
from streamworker.io.keys import dedup_record_key


def test_methods_chain_and_record_commands_in_order() -> None:
    effects = Effects().incrby("a", 2).hincrby("h", "f", -1).sadd("s", "x", "y").delete("a", "b")
    assert [(op.command, op.key, op.args) for op in effects] == [
        ("incrby", b"a", (b"2",)),
        ("hincrby", b"h", (b"f", b"-1")),
        ("sadd", b"s", (b"x", b"y")),
        ("del", b"a", ()),
        ("del", b"b", ()),
    ]
    assert len(effects) == 5


def test_values_are_encoded_as_redis_py_encodes_them() -> None:
    (op,) = Effects().rpush("l", "é", b"\x00", 7, 0.1).ops
    assert op.args == ("é".encode(), b"\x00", b"7", b"0.1")


def test_set_options_become_redis_arguments() -> None:
    (op,) = Effects().set("k", "v", ex=datetime.timedelta(minutes=2), nx=True).ops
    assert op.args == (b"v", b"EX", b"120", b"NX")
    (op,) = Effects().set("k", 1, px=1500, xx=True).ops
    assert op.args == (b"1", b"PX", b"1500", b"XX")
    (op,) = Effects().set("k", "v", keepttl=True).ops
    assert op.args == (b"v", b"KEEPTTL")


def test_hset_takes_a_field_and_value_and_or_a_mapping() -> None:
    (op,) = Effects().hset("h", "a", 1, mapping={"b": "2"}).ops
    assert op.args == (b"a", b"1", b"b", b"2")


def test_zadd_puts_flags_before_score_member_pairs() -> None:
    (op,) = Effects().zadd("z", {"m": 1.5, "n": 2}, xx=True, gt=True).ops
    assert op.args == (b"XX", b"GT", b"1.5", b"m", b"2", b"n")


def test_zincrby_follows_redis_py_argument_order() -> None:
    (op,) = Effects().zincrby("z", 3, "member").ops
    assert op.args == (b"3", b"member")


def test_xadd_uses_an_auto_id_and_optional_maxlen() -> None:
    (op,) = Effects().xadd("{s}:out", {"a": 1}, maxlen=100).ops
    assert op.args == (b"MAXLEN", b"~", b"100", b"*", b"a", b"1")
    (op,) = Effects().xadd("{s}:out", {"a": 1}, maxlen=5, approximate=False).ops
    assert op.args[:3] == (b"MAXLEN", b"=", b"5")


def test_long_member_lists_are_split_into_several_commands_of_the_same_effect() -> None:
    effects = Effects().sadd("s", *range(2500))
    assert [len(op.args) for op in effects] == [1000, 1000, 500]
    effects = Effects().zadd("z", {f"m{i}": i for i in range(600)}, nx=True)
    assert all(op.args[0] == b"NX" for op in effects)
    assert sum(len(op.args) - 1 for op in effects) == 1200


def test_extend_appends_the_other_effects() -> None:
    effects = Effects().incr("a").extend(Effects().expire("a", 60))
    assert [op.command for op in effects] == ["incrby", "expire"]


@pytest.mark.parametrize(
    ("build", "message"),
    [
        (lambda e: e.incrby("k", "1"), "must be an int"),
        (lambda e: e.incrby("k", True), "must be an int"),
        (lambda e: e.incrby("k", 2**63), "64-bit"),
        (lambda e: e.hincrby("k", "f", 1.5), "must be an int"),
        (lambda e: e.incrbyfloat("k", math.nan), "finite"),
        (lambda e: e.hincrbyfloat("k", "f", math.inf), "finite"),
        (lambda e: e.zadd("k", {"m": math.nan}), "finite"),
        (lambda e: e.zadd("k", {}), "non-empty"),
        (lambda e: e.zadd("k", {"m": 1}, nx=True, gt=True), "nx cannot"),
        (lambda e: e.zincrby("k", "1", "m"), "int or a float"),
        (lambda e: e.set("k", None), "must be str"),
        (lambda e: e.set("k", "v", ex=0), "between 1"),
        (lambda e: e.set("k", "v", ex=1, px=1), "mutually exclusive"),
        (lambda e: e.set("k", "v", nx=True, xx=True), "mutually exclusive"),
        (lambda e: e.expire("k", -5), "between 1"),
        (lambda e: e.sadd("k"), "at least one"),
        (lambda e: e.delete(), "at least one"),
        (lambda e: e.hset("k"), "non-empty mapping"),
        (lambda e: e.hset("k", "f"), "needs a value"),
        (lambda e: e.xadd("k", {}), "non-empty"),
        (lambda e: e.xadd("k", {"a": 1}, maxlen=-1), "maxlen"),
        (lambda e: e.incrby(12, 1), "key must be str or bytes"),
        (lambda e: e.sadd("k", object()), "must be str"),
    ],
)
def test_bad_arguments_are_refused_when_the_effect_is_built(build, message) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(EffectError, match=message):
        build(Effects())


def test_a_refused_argument_leaves_the_effects_unchanged() -> None:
    effects = Effects().incr("a")
    with pytest.raises(EffectError):
        effects.incrby("b", "x")  # type: ignore[arg-type]
    assert [op.key for op in effects] == [b"a"]


def test_handler_results_none_and_effects_are_accepted_anything_else_refused() -> None:
    assert effects_of(None) == ()
    assert effects_of(Effects().incr("a")) == (Effect("incrby", b"a", (b"1",)),)
    with pytest.raises(EffectError, match="returns Effects or None"):
        effects_of({"a": 1})


def test_the_business_key_record_shares_the_streams_hash_tag() -> None:
    assert dedup_record_key("orders", "billing") == "{orders}:dedup:billing"
    assert dedup_record_key("{shop}:orders", "billing") == "{shop}:orders:dedup:billing"

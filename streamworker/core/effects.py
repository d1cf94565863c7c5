"""``Effects``: the Redis writes an ``idempotency="lua"`` handler asks for.

A handler builds an :class:`Effects` with chainable methods named after the Redis commands (lower
case, redis-py-like arguments) and returns it; returning ``None`` means "no effects". The strategy
(:mod:`streamworker.idempotency.lua`) applies every effect of a message, records it as processed
and XACKs it in one atomic script, so the effects of a message apply at most once::

    @app.handler("clicks", group="counters", idempotency="lua")
    def count(msg: Message) -> Effects:
        page = msg.fields["page"]
        return (
            Effects()
            .hincrby("{clicks}:views", page, 1)
            .sadd(f"{{clicks}}:visitors:{page}", msg.fields["user"])
            .zincrby("{clicks}:top", 1, page)
        )

Arguments are checked here, when the handler builds the effects (types, integer and float
ranges, option combinations): a mistake raises :class:`EffectError` in the handler, like any
other handler error. What can only be known in Redis (the type of an existing key, whether the
string under a key is a number) is checked by the script before it writes anything of the
message.

An ``Effects`` is a plain list of commands: build it in one thread; it performs no I/O.
"""

from __future__ import annotations

import datetime
import math
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any, Self, TypeAlias

from pydantic import BaseModel

from streamworker.core.codec import encode
from streamworker.errors import StreamworkerError

KeyT: TypeAlias = str | bytes
"""A Redis key: ``str`` (encoded as UTF-8) or ``bytes``."""

ValueT: TypeAlias = str | bytes | int | float
"""A value: ``str`` (UTF-8), ``bytes``, ``int`` or ``float`` (sent as redis-py sends them)."""

_INT64_MIN = -(2**63)
_INT64_MAX = 2**63 - 1
# Commands with many members are split into commands of at most this many arguments (the
# result is the same): Lua's unpack() in Redis has a hard limit of about 8000 values.
_CHUNK_ARGS = 1000
# XADD cannot be split: its fields must fit one call.
_MAX_XADD_ARGS = 4000
_MAX_EXPIRE_S = 10**12
_MAX_EXPIRE_MS = 10**15
_SECOND = datetime.timedelta(seconds=1)
_MILLISECOND = datetime.timedelta(milliseconds=1)


class EffectError(StreamworkerError):
    """An effect that cannot be applied: a bad argument (raised while the handler builds its
    :class:`Effects`) or a conflict with the data in Redis (reported by the script, which then
    writes nothing of the message). Handled like a handler failure: the message stays pending,
    is retried with backoff and dead-lettered after ``max_deliveries``."""


@dataclass(frozen=True, slots=True)
class Effect:
    """One Redis command on one key: ``command`` is the lower-case command name, ``args`` what
    follows the key, already encoded."""

    command: str
    key: bytes
    args: tuple[bytes, ...]

    def describe(self) -> str:
        """``"hincrby '{clicks}:views'"``: the command and its key, for error messages."""
        return f"{self.command} {_show(self.key)}"


def _show(key: bytes) -> str:
    return repr(key.decode("utf-8", "backslashreplace"))


def _key(key: object, what: str = "key") -> bytes:
    if isinstance(key, str):
        return key.encode("utf-8")
    if isinstance(key, bytes | bytearray | memoryview):
        return bytes(key)
    raise EffectError(f"{what} must be str or bytes, not {type(key).__name__}")


def _value(value: object, what: str = "value") -> bytes:
    # The encoding redis-py uses, so that an Effects write reads back as a client write would.
    if isinstance(value, bool) or value is None:
        raise EffectError(f"{what} must be str, bytes, int or float, not {value!r}")
    if isinstance(value, str):
        return value.encode("utf-8")
    if isinstance(value, bytes | bytearray | memoryview):
        return bytes(value)
    if isinstance(value, int):
        return str(value).encode()
    if isinstance(value, float):
        return repr(value).encode()
    raise EffectError(f"{what} must be str, bytes, int or float, not {type(value).__name__}")


def _int64(value: object, what: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise EffectError(f"{what} must be an int, not {value!r}")
    if not _INT64_MIN <= value <= _INT64_MAX:
        raise EffectError(f"{what} {value} is out of the 64-bit signed integer range")
    return value


def _finite(value: object, what: str) -> bytes:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise EffectError(f"{what} must be an int or a float, not {value!r}")
    if isinstance(value, float):
        if not math.isfinite(value):
            raise EffectError(f"{what} must be finite, not {value!r}")
        return repr(value).encode()
    if abs(value) >= 2**53:
        # Sent as an integer, parsed as a double (or long double) by Redis: keep it exact.
        raise EffectError(f"{what} {value} is too large to be exact as a float")
    return str(value).encode()


def _duration(value: object, what: str, unit: datetime.timedelta, limit: int) -> bytes:
    if isinstance(value, datetime.timedelta):
        value = value // unit
    if isinstance(value, bool) or not isinstance(value, int):
        raise EffectError(f"{what} must be an int or a timedelta, not {value!r}")
    if not 1 <= value <= limit:
        raise EffectError(f"{what} must be between 1 and {limit}, not {value}")
    return str(value).encode()


def _chunks(items: list[bytes], size: int) -> Iterator[list[bytes]]:
    for start in range(0, len(items), size):
        yield items[start : start + size]


class Effects:
    """The Redis writes of one message, applied atomically with its XACK (``idempotency="lua"``).

    Every method appends one command (or several, for long member lists: same result) and returns
    the same ``Effects``, so calls chain. Effects apply in the order they were added. Arguments
    are validated at once; :class:`EffectError` on a bad one.

    On Redis Cluster every key must hash to the slot of the consumed stream: give it the
    stream's hash tag (``{clicks}:views`` for stream ``clicks``). Effects may not touch the
    consumed stream itself, except to XADD to it.
    """

    __slots__ = ("_ops",)

    def __init__(self) -> None:
        self._ops: list[Effect] = []

    def __repr__(self) -> str:
        return f"Effects({', '.join(op.describe() for op in self._ops)})"

    def __len__(self) -> int:
        return len(self._ops)

    def __iter__(self) -> Iterator[Effect]:
        return iter(self._ops)

    @property
    def ops(self) -> tuple[Effect, ...]:
        """The commands, in the order they will apply."""
        return tuple(self._ops)

    def _add(self, command: str, key: bytes, args: Iterable[bytes]) -> Self:
        self._ops.append(Effect(command, key, tuple(args)))
        return self

    def extend(self, other: Effects) -> Self:
        """Append every command of ``other`` (e.g. effects built by a helper function)."""
        if not isinstance(other, Effects):
            raise EffectError(f"extend() takes an Effects, not {type(other).__name__}")
        self._ops.extend(other._ops)
        return self

    # Strings ----------------------------------------------------------------------------------

    def set(
        self,
        key: KeyT,
        value: ValueT,
        ex: int | datetime.timedelta | None = None,
        px: int | datetime.timedelta | None = None,
        nx: bool = False,
        xx: bool = False,
        keepttl: bool = False,
    ) -> Self:
        """SET ``key`` to ``value``; ``ex`` seconds / ``px`` milliseconds to live; ``nx`` only if
        absent, ``xx`` only if present; ``keepttl`` keeps the current time to live."""
        args = [_value(value)]
        if ex is not None and px is not None:
            raise EffectError("set(): ex and px are mutually exclusive")
        if nx and xx:
            raise EffectError("set(): nx and xx are mutually exclusive")
        if keepttl and (ex is not None or px is not None):
            raise EffectError("set(): keepttl cannot be combined with ex or px")
        if ex is not None:
            args += [b"EX", _duration(ex, "set(): ex", _SECOND, _MAX_EXPIRE_S)]
        if px is not None:
            args += [b"PX", _duration(px, "set(): px", _MILLISECOND, _MAX_EXPIRE_MS)]
        if nx:
            args.append(b"NX")
        if xx:
            args.append(b"XX")
        if keepttl:
            args.append(b"KEEPTTL")
        return self._add("set", _key(key), args)

    def incrby(self, key: KeyT, amount: int = 1) -> Self:
        """INCRBY: add the integer ``amount`` (may be negative) to the integer under ``key``."""
        return self._add("incrby", _key(key), [str(_int64(amount, "incrby(): amount")).encode()])

    def incr(self, key: KeyT, amount: int = 1) -> Self:
        """The same as :meth:`incrby` (redis-py's ``incr``)."""
        return self.incrby(key, amount)

    def incrbyfloat(self, key: KeyT, amount: float = 1.0) -> Self:
        """INCRBYFLOAT: add the finite number ``amount`` to the number under ``key``."""
        return self._add("incrbyfloat", _key(key), [_finite(amount, "incrbyfloat(): amount")])

    # Keys -------------------------------------------------------------------------------------

    def delete(self, *keys: KeyT) -> Self:
        """DEL every key in ``keys``."""
        if not keys:
            raise EffectError("delete() needs at least one key")
        for key in keys:
            self._add("del", _key(key), ())
        return self

    def expire(self, key: KeyT, seconds: int | datetime.timedelta) -> Self:
        """EXPIRE: ``key`` lives ``seconds`` more (>= 1; use :meth:`delete` to delete)."""
        return self._add(
            "expire", _key(key), [_duration(seconds, "expire(): seconds", _SECOND, _MAX_EXPIRE_S)]
        )

    def pexpire(self, key: KeyT, milliseconds: int | datetime.timedelta) -> Self:
        """PEXPIRE: ``key`` lives ``milliseconds`` more (>= 1)."""
        return self._add(
            "pexpire",
            _key(key),
            [_duration(milliseconds, "pexpire(): milliseconds", _MILLISECOND, _MAX_EXPIRE_MS)],
        )

    # Hashes -----------------------------------------------------------------------------------

    def hset(
        self,
        key: KeyT,
        field: KeyT | None = None,
        value: ValueT | None = None,
        mapping: Mapping[KeyT, ValueT] | None = None,
    ) -> Self:
        """HSET ``field`` to ``value`` and/or every pair of ``mapping`` in the hash ``key``."""
        pairs: list[bytes] = []
        if field is not None:
            if value is None:
                raise EffectError("hset(): a field needs a value")
            pairs += [_key(field, "hset(): field"), _value(value, "hset(): value")]
        elif value is not None:
            raise EffectError("hset(): a value needs a field")
        if mapping is not None:
            if not isinstance(mapping, Mapping):
                raise EffectError(
                    f"hset(): mapping must be a mapping, not {type(mapping).__name__}"
                )
            for f, v in mapping.items():
                pairs += [_key(f, "hset(): field"), _value(v, "hset(): value")]
        if not pairs:
            raise EffectError("hset() needs a field and value, or a non-empty mapping")
        k = _key(key)
        for chunk in _chunks(pairs, _CHUNK_ARGS):
            self._add("hset", k, chunk)
        return self

    def hdel(self, key: KeyT, *fields: KeyT) -> Self:
        """HDEL ``fields`` from the hash ``key``."""
        return self._members("hdel", key, fields, "field")

    def hincrby(self, key: KeyT, field: KeyT, amount: int = 1) -> Self:
        """HINCRBY: add the integer ``amount`` to ``field`` of the hash ``key``."""
        return self._add(
            "hincrby",
            _key(key),
            [_key(field, "hincrby(): field"), str(_int64(amount, "hincrby(): amount")).encode()],
        )

    def hincrbyfloat(self, key: KeyT, field: KeyT, amount: float = 1.0) -> Self:
        """HINCRBYFLOAT: add the finite number ``amount`` to ``field`` of the hash ``key``."""
        return self._add(
            "hincrbyfloat",
            _key(key),
            [_key(field, "hincrbyfloat(): field"), _finite(amount, "hincrbyfloat(): amount")],
        )

    # Sets and lists ---------------------------------------------------------------------------

    def _members(self, command: str, key: KeyT, members: tuple[object, ...], what: str) -> Self:
        if not members:
            raise EffectError(f"{command}() needs at least one {what}")
        encoded = [_value(m, f"{command}(): {what}") for m in members]
        k = _key(key)
        for chunk in _chunks(encoded, _CHUNK_ARGS):
            self._add(command, k, chunk)
        return self

    def sadd(self, key: KeyT, *members: ValueT) -> Self:
        """SADD ``members`` to the set ``key``."""
        return self._members("sadd", key, members, "member")

    def srem(self, key: KeyT, *members: ValueT) -> Self:
        """SREM ``members`` from the set ``key``."""
        return self._members("srem", key, members, "member")

    def rpush(self, key: KeyT, *values: ValueT) -> Self:
        """RPUSH ``values`` onto the tail of the list ``key``."""
        return self._members("rpush", key, values, "value")

    def lpush(self, key: KeyT, *values: ValueT) -> Self:
        """LPUSH ``values`` onto the head of the list ``key`` (the last one ends up first)."""
        return self._members("lpush", key, values, "value")

    # Sorted sets ------------------------------------------------------------------------------

    def zadd(
        self,
        key: KeyT,
        mapping: Mapping[ValueT, float],
        *,
        nx: bool = False,
        xx: bool = False,
        gt: bool = False,
        lt: bool = False,
    ) -> Self:
        """ZADD every ``member: score`` of ``mapping`` to the sorted set ``key``; ``nx``/``xx``
        only new/existing members, ``gt``/``lt`` only raise/lower scores (as ZADD)."""
        if nx and xx:
            raise EffectError("zadd(): nx and xx are mutually exclusive")
        if gt and lt:
            raise EffectError("zadd(): gt and lt are mutually exclusive")
        if nx and (gt or lt):
            raise EffectError("zadd(): nx cannot be combined with gt or lt")
        if not isinstance(mapping, Mapping) or not mapping:
            raise EffectError("zadd() needs a non-empty mapping of member -> score")
        flags = [flag for flag, on in ((b"NX", nx), (b"XX", xx), (b"GT", gt), (b"LT", lt)) if on]
        pairs: list[bytes] = []
        for member, score in mapping.items():
            pairs += [_finite(score, "zadd(): score"), _value(member, "zadd(): member")]
        k = _key(key)
        for chunk in _chunks(pairs, _CHUNK_ARGS):
            self._add("zadd", k, [*flags, *chunk])
        return self

    def zincrby(self, key: KeyT, amount: float, member: ValueT) -> Self:
        """ZINCRBY: add the finite number ``amount`` to ``member``'s score (redis-py's order)."""
        return self._add(
            "zincrby",
            _key(key),
            [_finite(amount, "zincrby(): amount"), _value(member, "zincrby(): member")],
        )

    def zrem(self, key: KeyT, *members: ValueT) -> Self:
        """ZREM ``members`` from the sorted set ``key``."""
        return self._members("zrem", key, members, "member")

    # Streams ----------------------------------------------------------------------------------

    def xadd(
        self,
        stream: KeyT,
        fields: Mapping[KeyT, ValueT],
        *,
        maxlen: int | None = None,
        approximate: bool = True,
    ) -> Self:
        """XADD an entry with ``fields`` and an auto-generated id to ``stream``; ``maxlen`` trims
        the stream (``approximate``: ``MAXLEN ~``, as redis-py)."""
        if not isinstance(fields, Mapping) or not fields:
            raise EffectError("xadd() needs a non-empty mapping of fields")
        args: list[bytes] = []
        if maxlen is not None:
            if isinstance(maxlen, bool) or not isinstance(maxlen, int) or maxlen < 0:
                raise EffectError(f"xadd(): maxlen must be an int >= 0, not {maxlen!r}")
            args += [b"MAXLEN", b"~" if approximate else b"=", str(maxlen).encode()]
        args.append(b"*")
        for f, v in fields.items():
            args += [_key(f, "xadd(): field"), _value(v, "xadd(): value")]
        if len(args) > _MAX_XADD_ARGS:
            raise EffectError(f"xadd(): at most {_MAX_XADD_ARGS // 2 - 2} fields per entry")
        return self._add("xadd", _key(stream, "stream"), args)

    def publish(
        self,
        stream: KeyT,
        value: BaseModel | Mapping[str, Any],
        *,
        body_field: str | None = None,
        maxlen: int | None = None,
        approximate: bool = True,
    ) -> Self:
        """XADD ``value`` (a pydantic model or a mapping) to ``stream``, encoded as
        :meth:`streamworker.producing.producer.Producer.publish` encodes it: what a handler of ``stream``
        with ``Message[Model]`` (and the same ``body_field``) decodes back into an equal model.
        Applied with the message's XACK, so the entry is added exactly once. On Redis Cluster,
        ``stream`` must share the consumed stream's hash tag (``{orders}:ledger``); for a
        partitioned target, pass the partition's stream key (``partitions.PartitionedStream``).

        A value that cannot be encoded raises :class:`~streamworker.core.codec.EncodeError`, a
        permanent failure: the message is dead-lettered at once (it would fail every time)."""
        fields: dict[KeyT, ValueT] = dict(encode(value, body_field).items())
        return self.xadd(stream, fields, maxlen=maxlen, approximate=approximate)

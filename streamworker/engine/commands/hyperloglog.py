"""HyperLogLog commands: PFADD, PFCOUNT, PFMERGE, PFDEBUG, PFSELFTEST.

Values are plain strings in Redis 7.0's byte layout (:mod:`streamworker.engine.model.hll`),
so GET of a key is byte-identical to redis-server's after the same commands and a value
written by redis-server (SET of its bytes) is accepted. Like Redis, these commands modify the
string in place: the key keeps its TTL. PFCOUNT of one key refreshes the cached cardinality
in the header and is logged to the append-only file when it did.
"""

from __future__ import annotations

import math
import random
from typing import TYPE_CHECKING

from streamworker.engine import msgs
from streamworker.engine.commands import command
from streamworker.engine.errors import CommandError
from streamworker.engine.model import hll
from streamworker.engine.notify import NOTIFY_STRING
from streamworker.engine.replies import OK, Status

if TYPE_CHECKING:
    from streamworker.engine.context import Ctx
    from streamworker.engine.replies import Reply


def _max_sparse_bytes(ctx: Ctx) -> int:
    return int(ctx.engine.config.get("hll-sparse-max-bytes") or 3000)


def _lookup(ctx: Ctx, key: bytes) -> bytes | None:
    """The key's HLL string, None if missing; WRONGTYPE errors as Redis's isHLLObjectOrReply."""
    value = ctx.db.get(key)
    if value is None:
        return None
    if type(value) is not bytes:
        raise CommandError(msgs.WRONGTYPE)
    if not hll.is_hll(value):
        raise CommandError(msgs.HLL_WRONGTYPE)
    return value


def _add(buf: bytearray, element: bytes, max_bytes: int) -> tuple[int, bytearray]:
    index, count = hll.pattern(element)
    if buf[4] == hll.DENSE:
        return (1 if hll.dense_set(buf, index, count) else 0), buf
    return hll.sparse_set(buf, index, count, max_bytes)


def _store(ctx: Ctx, key: bytes, value: bytes) -> None:
    # Redis keeps an HLL in a raw string (created raw, or unshared before an update), so
    # OBJECT ENCODING says raw, as for APPEND.
    ctx.db.set(key, value, keep_ttl=True)
    ctx.db.mark_big(key)


@command("pfadd", arity=-2, flags=("write", "denyoom", "fast"), first_key=1, last_key=1, step=1)
def pfadd(ctx: Ctx, args: list[bytes]) -> Reply:
    """PFADD key [element ...] -> 1 if a register changed (or the key was created), else 0."""
    key = args[0]
    value = _lookup(ctx, key)
    updated = 0
    if value is None:
        buf = hll.work_buffer(hll.new_sparse())
        updated = 1
    else:
        buf = hll.work_buffer(value)
    max_bytes = _max_sparse_bytes(ctx)
    for element in args[1:]:
        ret, buf = _add(buf, element, max_bytes)
        if ret == 1:
            updated += 1
        elif ret < 0:
            # Redis changed the string in place for the elements before the corrupted spot
            # and leaves it so (without logging anything).
            if value is not None and hll.final_value(buf) != value:
                _store(ctx, key, hll.final_value(buf))
            ctx.no_propagate()
            raise CommandError(msgs.HLL_CORRUPTED)
    # Redis 7.0 counts the key's creation and each register that changed.
    ctx.changed(updated)
    if not updated:
        ctx.no_propagate()
        return 0
    hll.invalidate_cache(buf)
    _store(ctx, key, hll.final_value(buf))
    # A string-class event, as in Redis (after "new" when the key was created).
    ctx.notify(NOTIFY_STRING, b"pfadd", key)
    return 1


@command("pfcount", arity=-2, flags=("readonly", "may-replicate"), first_key=1, last_key=-1, step=1)
def pfcount(ctx: Ctx, args: list[bytes]) -> Reply:
    """PFCOUNT key [key ...] -> estimated cardinality (of the union for several keys)."""
    if len(args) > 1:
        registers = bytearray(hll.REGISTERS)
        for key in args:
            value = _lookup(ctx, key)
            if value is None:
                continue
            if not hll.merge_max(registers, value):
                raise CommandError(msgs.HLL_CORRUPTED)
        return hll.estimate(hll.raw_histogram(registers))
    key = args[0]
    value = _lookup(ctx, key)
    if value is None:
        return 0
    cached = hll.cached_cardinality(value)
    if cached is not None:
        return cached
    card = hll.cardinality(value)
    if card is None:
        raise CommandError(msgs.HLL_CORRUPTED)
    buf = bytearray(value)
    hll.store_cardinality(buf, card)
    _store(ctx, key, bytes(buf))
    # A read-only command that changed the string: Redis propagates it as received.
    ctx.changed()
    ctx.propagate(list(ctx.argv))
    return card


@command("pfmerge", arity=-2, flags=("write", "denyoom"), first_key=1, last_key=-1, step=1)
def pfmerge(ctx: Ctx, args: list[bytes]) -> Reply:
    """PFMERGE destkey [sourcekey ...] -> OK; the destination is part of the union."""
    registers = bytearray(hll.REGISTERS)
    use_dense = False
    for key in args:
        value = _lookup(ctx, key)
        if value is None:
            continue
        if value[4] == hll.DENSE:
            use_dense = True
        if not hll.merge_max(registers, value):
            raise CommandError(msgs.HLL_CORRUPTED)
    dest = args[0]
    current = ctx.db.get(dest)
    buf = hll.work_buffer(hll.new_sparse() if current is None else current)
    if use_dense and buf[4] == hll.SPARSE:
        dense = hll.sparse_to_dense(buf, len(buf) - 1)
        if dense is None:
            raise CommandError(msgs.HLL_CORRUPTED)
        buf = dense
    max_bytes = _max_sparse_bytes(ctx)
    hint = [hll.HDR_SIZE, 0, -1]  # registers are set in increasing order
    for index, count in enumerate(registers):
        if not count:
            continue
        if buf[4] == hll.DENSE:
            hll.dense_set(buf, index, count)
        else:
            _, buf = hll.sparse_set(buf, index, count, max_bytes, hint)
    hll.invalidate_cache(buf)
    _store(ctx, dest, hll.final_value(buf))
    # Redis names PFMERGE's event "pfadd", and sends it even when no register changed.
    ctx.notify(NOTIFY_STRING, b"pfadd", dest)
    return OK


@command("pfdebug", arity=3, flags=("write", "denyoom", "admin"), first_key=2, last_key=2, step=1)
def pfdebug(ctx: Ctx, args: list[bytes]) -> Reply:
    """PFDEBUG GETREG|DECODE|ENCODING|TODENSE key (Redis's internal debugging command)."""
    sub, key = args[0], args[1]
    value = ctx.db.get(key)
    if value is None:
        raise CommandError(msgs.HLL_NO_SUCH_KEY)
    value = _lookup(ctx, key)
    assert value is not None
    name = sub.lower()
    if name == b"getreg":
        if value[4] == hll.SPARSE:
            dense = hll.sparse_to_dense(value)
            if dense is None:
                raise CommandError(msgs.HLL_CORRUPTED)
            value = bytes(dense)
            _store(ctx, key, value)
        else:
            ctx.no_propagate()
            ctx.changed(0)
        return hll.dense_registers(value)
    if name != b"todense":
        ctx.no_propagate()
        ctx.changed(0)
    if name == b"decode":
        if value[4] != hll.SPARSE:
            raise CommandError(msgs.HLL_NOT_SPARSE)
        return hll.decode_sparse(value)
    if name == b"encoding":
        return Status("dense" if value[4] == hll.DENSE else "sparse")
    if name == b"todense":
        if value[4] != hll.SPARSE:
            ctx.no_propagate()
            ctx.changed(0)
            return 0
        dense = hll.sparse_to_dense(value)
        if dense is None:
            raise CommandError(msgs.HLL_CORRUPTED)
        _store(ctx, key, bytes(dense))
        return 1
    raise CommandError(msgs.hll_unknown_debug(sub))


# Sizes of PFSELFTEST's checks: Redis runs 1000 register cycles and 10 million elements in C;
# these keep the same checks within a fraction of a second in Python.
_SELFTEST_REGISTER_CYCLES = 3
_SELFTEST_ELEMENTS = 2000


@command("pfselftest", arity=1, flags=("admin",))
def pfselftest(ctx: Ctx, args: list[bytes]) -> Reply:
    """PFSELFTEST -> OK after checking this implementation: dense registers keep what is
    written without disturbing their neighbours, sparse and dense forms of the same elements
    agree, and the estimate stays within six standard errors."""
    rng = random.Random()
    dense = bytearray(hll.DENSE_SIZE)
    for _ in range(_SELFTEST_REGISTER_CYCLES):
        expected = [rng.randrange(64) for _ in range(hll.REGISTERS)]
        for i, v in enumerate(expected):
            hll.dense_put(dense, i, v)
        got = hll.dense_registers(dense)
        for i, v in enumerate(expected):
            if got[i] != v or hll.dense_get(dense, i) != v:
                raise CommandError(f"TESTFAILED Register {i} should be {v} but is {got[i]}")
    dense = bytearray(hll.DENSE_SIZE)
    dense[0:4] = b"HYLL"
    sparse = hll.work_buffer(hll.new_sparse())
    max_bytes = _max_sparse_bytes(ctx)
    relerr = 1.04 / hll.REGISTERS**0.5
    seed = rng.getrandbits(64)
    checkpoint = 1
    for j in range(1, _SELFTEST_ELEMENTS + 1):
        element = (j ^ seed).to_bytes(8, "little")
        _add(dense, element, max_bytes)
        _, sparse = _add(sparse, element, max_bytes)
        if j != checkpoint:
            continue
        if j < max_bytes // 2 and sparse[4] != hll.SPARSE:
            raise CommandError("TESTFAILED sparse encoding not used")
        card = hll.cardinality(dense)
        if card != hll.cardinality(hll.final_value(sparse)):
            raise CommandError("TESTFAILED dense/sparse disagree")
        assert card is not None
        maxerr = 1 if j == 10 else math.ceil(relerr * 6 * checkpoint)
        if abs(checkpoint - card) > maxerr:
            raise CommandError(
                f"TESTFAILED Too big error. card:{checkpoint} abserr:{abs(checkpoint - card)}"
            )
        checkpoint *= 10
    return OK

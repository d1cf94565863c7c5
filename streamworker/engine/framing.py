"""How the writes of one command call are framed in a write log: the append-only file
(:mod:`.aof`) and the replication stream (:mod:`.replication`) both wrap them the way
Redis 7.0 propagates them. Pure: the framing bytes are the caller's.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

__all__ = ["encode_call"]


def encode_call(
    out: bytearray,
    ops: Sequence[tuple[int, Sequence[bytes]]],
    db: int,
    *,
    encode: Callable[[bytearray, Sequence[bytes]], None],
    select: Callable[[int], bytes],
    multi: bytes,
    exec_: bytes,
) -> int:
    """Append the writes of one call, ``ops`` as (database, argv), to a stream that is in
    database ``db``: a ``SELECT`` wherever the database changes and, for more than one write,
    ``MULTI``/``EXEC`` around them (``MULTI`` in the first write's database, as Redis gives
    it). The framing is the caller's (``encode``, ``select``, ``multi``, ``exec_``: the file's
    checked records or the replication stream's plain ones). Returns the stream's database
    afterwards."""
    wrap = len(ops) > 1
    if wrap:
        if ops[0][0] != db:
            db = ops[0][0]
            out += select(db)
        out += multi
    for op_db, argv in ops:
        if op_db != db:
            db = op_db
            out += select(db)
        encode(out, argv)
    if wrap:
        out += exec_
    return db

"""Streams' IDMP maps (Redis 8.6 idempotent production) in an RDB file, as aux fields.

The engine writes Redis 7.0's RDB format (``REDIS0010``), which has no place for an IDMP map in
a stream's encoding. The maps go into ``sw-idmp`` aux fields after the keys instead, one per
stream: redis-server 7.0 loads such a file and ignores the field (it skips aux fields it does
not know), the engine attaches each map to its stream again. Only an engine that speaks IDMP
(8.6 or later) reads them back; a 7.0 engine drops them, as redis-server does.

Value layout: db index, key, duration (s), maxsize, iids added, duplicates (RDB lengths),
number of producers, then per producer its pid, number of iids and per iid the iid, the
16-byte big-endian entry ID and the 8-byte little-endian time it was added (ms).
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Iterator
from typing import TYPE_CHECKING

from streamworker.engine.model.idmp import IdmpState
from streamworker.engine.model.stream import Stream
from streamworker.engine.rdb.primitives import Reader, save_len, save_string
from streamworker.engine.versions import IDMP_SINCE

if TYPE_CHECKING:
    from streamworker.engine.core import Engine

__all__ = ["AUX_NAME", "attach_idmp", "idmp_aux_values"]

AUX_NAME = b"sw-idmp"


def idmp_aux_values(engine: Engine) -> Iterator[bytes]:
    """One aux value per stream that has an IDMP map (call with the engine lock held)."""
    now = engine.clock()
    for db in engine.keyspace.dbs:
        for key, value in db.iter_items():
            if type(value) is not Stream or value.idmp is None:
                continue
            st = value.idmp
            st.expire(now)
            out = [
                save_len(db.index),
                save_string(key, False),
                save_len(st.duration_s),
                save_len(st.maxsize),
                save_len(st.iids_added),
                save_len(st.iids_duplicates),
                save_len(len(st.producers)),
            ]
            for pid, iids in st.producers.items():
                out += [save_string(pid, False), save_len(len(iids))]
                for iid, (sid, added) in iids.items():
                    out += [
                        save_string(iid, False),
                        sid.to_bytes(16, "big"),
                        added.to_bytes(8, "little", signed=True),
                    ]
            yield b"".join(out)


def attach_idmp(engine: Engine, blobs: list[bytes]) -> None:
    """Give the loaded streams their IDMP maps back (an engine without IDMP ignores them, as
    redis-server 7.0 does). Raises RdbFormatError for a damaged value; a map whose key is
    not a stream (any more) is dropped."""
    if not engine.version.at_least(IDMP_SINCE):
        return
    for blob in blobs:
        r = Reader(blob)
        dbi = r.length()
        key = r.string()
        st = IdmpState(r.length(), r.length())
        st.iids_added = r.length()
        st.iids_duplicates = r.length()
        for _ in range(r.count(2)):
            pid = r.string()
            iids: OrderedDict[bytes, tuple[int, int]] = OrderedDict()
            for _ in range(r.count(25)):
                iid = r.string()
                sid = int.from_bytes(r.read(16), "big")
                added = int.from_bytes(r.read(8), "little", signed=True)
                iids[iid] = (sid, added)
            st.producers[pid] = iids
        if dbi < len(engine.keyspace.dbs):
            value = engine.keyspace.dbs[dbi].data.get(key)
            if type(value) is Stream:
                value.idmp = st

"""Streams in RDB: ``RDB_TYPE_STREAM_LISTPACKS_2`` (Redis 7.0) written, and also
``RDB_TYPE_STREAM_LISTPACKS`` (Redis 5/6) read.

Each node of the engine's stream model becomes the listpack Redis keeps under that node's master
ID: the master entry (live count, deleted count, the master field names, a 0 terminator), then
per entry its flags, ms/seq deltas from the master ID, either the values alone (same fields as
the master) or the field count and the pairs, and the entry's element count. Then come the
stream's counters, and each consumer group (name order) with its PEL and consumers (name order)
with their PELs. Reading rebuilds the same nodes, so XINFO's node counts and approximate
trimming behave as they did on the server that wrote the data.
"""

from __future__ import annotations

from array import array
from typing import TYPE_CHECKING

from streamworker.engine.ids import MASK64
from streamworker.engine.model import stream as sm
from streamworker.engine.rdb.listpack import PackedFormatError, listpack_decode, listpack_encode
from streamworker.engine.rdb.primitives import save_len, save_ms_time, save_string

if TYPE_CHECKING:
    from streamworker.engine.rdb.primitives import Reader

__all__ = ["decode_stream", "encode_stream"]

_FLAG_DELETED = 1
_FLAG_SAME = 2
_TWO64 = 1 << 64


def _i64(v: int) -> int:
    v &= 0xFFFFFFFFFFFFFFFF
    return v - _TWO64 if v >= 1 << 63 else v


def _id16(sid: int) -> bytes:
    return sid.to_bytes(16, "big")


def node_listpack(node: sm.StreamNode) -> bytes:
    """The listpack Redis 7.0 holds for ``node``."""
    n = len(node.ms)
    fields = node.fields
    nf_master = len(fields)
    items: list[bytes | int] = [node.live, n - node.live, nf_master, *fields, 0]
    mms = node.master >> 64
    mseq = node.master & MASK64
    for i in range(n):
        flag = node.flags[i] & (_FLAG_DELETED | _FLAG_SAME)
        fv = node.decode(i)
        items += (flag, _i64(node.ms[i] - mms), _i64(node.seq[i] - mseq))
        nf = len(fv) // 2
        if flag & _FLAG_SAME:
            items += fv[1::2]
            items.append(nf + 3)
        else:
            items.append(nf)
            items += fv
            items.append(2 * nf + 4)
    return listpack_encode(items)


def encode_stream(s: sm.Stream, compress: bool = True) -> bytes:
    """The body of an ``RDB_TYPE_STREAM_LISTPACKS_2`` object (after the type byte)."""
    out = [save_len(len(s._nodes))]
    for node in s._nodes:
        out.append(save_string(_id16(node.master), compress))
        out.append(save_string(node_listpack(node), compress))
    out.append(save_len(s.length))
    for sid in (s.last_id, s.first_id, s.max_deleted_id):
        out.append(save_len(sid >> 64))
        out.append(save_len(sid & MASK64))
    out.append(save_len(s.entries_added))
    groups = s.sorted_groups()
    out.append(save_len(len(groups)))
    for g in groups:
        out.append(save_string(g.name, compress))
        out.append(save_len(g.last_id >> 64))
        out.append(save_len(g.last_id & MASK64))
        out.append(save_len(g.entries_read))
        out.append(save_len(len(g.pel)))
        for sid, pe in g.pel.items():
            out.append(_id16(sid))
            out.append(save_ms_time(pe.delivery_time))
            out.append(save_len(pe.delivery_count))
        consumers = g.sorted_consumers()
        out.append(save_len(len(consumers)))
        for c in consumers:
            out.append(save_string(c.name, compress))
            out.append(save_ms_time(c.seen_time))
            out.append(save_len(len(c.pel)))
            out += [_id16(sid) for sid in c.pel]
    return b"".join(out)


def _as_bytes(x: bytes | int) -> bytes:
    return x if isinstance(x, bytes) else b"%d" % x


def _build_node(r: Reader, master: int, lp: bytes) -> sm.StreamNode | None:
    try:
        items = listpack_decode(lp, as_int=True)
    except PackedFormatError as exc:
        raise r.error(f"stream listpack: {exc}") from None
    it = iter(items)

    def nxt_int() -> int:
        v = next(it)
        if not isinstance(v, int):
            raise r.error("stream listpack: integer expected")
        return v

    try:
        count = nxt_int()
        deleted = nxt_int()
        nf_master = nxt_int()
        if nf_master < 0 or nf_master > len(items):
            raise r.error("stream listpack: bad master field count")
        fields = [_as_bytes(next(it)) for _ in range(nf_master)]
        if nxt_int() != 0:
            raise r.error("stream listpack: bad master entry terminator")
        node = sm.StreamNode(master, fields)
        blob = bytearray()
        mms = master >> 64
        mseq = master & MASK64
        live = 0
        for flag in it:
            if not isinstance(flag, int) or flag & ~(_FLAG_DELETED | _FLAG_SAME):
                raise r.error("stream listpack: bad entry flags")
            ms = (mms + nxt_int()) & MASK64
            seq = (mseq + nxt_int()) & MASK64
            if flag & _FLAG_SAME:
                values = [_as_bytes(next(it)) for _ in range(nf_master)]
                fv: list[bytes] = fields * 2
                fv[0::2] = fields
                fv[1::2] = values
                want = nf_master + 3
            else:
                nf = nxt_int()
                if nf <= 0 or 2 * nf > len(items):
                    raise r.error("stream listpack: bad entry field count")
                fv = [_as_bytes(next(it)) for _ in range(2 * nf)]
                values = fv[1::2]
                want = 2 * nf + 4
            if nxt_int() != want:
                raise r.error("stream listpack: bad entry element count")
            # The engine's node layout (see model/stream.py): lengths then strings.
            stored = values if flag & _FLAG_SAME else fv
            eflag = flag
            off = len(blob)
            if not flag & _FLAG_SAME:
                blob += len(fv).to_bytes(4, "little")
            if any(len(x) > 255 for x in stored):
                eflag |= sm.WIDE_INT
                blob += array("I", map(len, stored)).tobytes()
            else:
                blob += bytes(map(len, stored))
            blob += b"".join(stored)
            node.ms.append(ms)
            node.seq.append(seq)
            node.flags.append(eflag)
            node.offs.append(off)
            if not flag & _FLAG_DELETED:
                live += 1
    except StopIteration:
        raise r.error("stream listpack: truncated entry") from None
    if live != count or len(node.ms) - live != deleted:
        raise r.error("stream listpack: entry counts do not match the master entry")
    if not node.ms:
        raise r.error("stream listpack: empty node")
    if not live:
        return None  # Redis frees a node whose entries are all deleted
    node.live = live
    h = 0
    while node.flags[h] & _FLAG_DELETED:
        h += 1
    node.head = h
    node.blob = bytes(blob)
    node.lp = len(lp) - sm.lp_int(live) - sm.lp_int(len(node.ms) - live)
    return node


def decode_stream(r: Reader, version: int) -> sm.Stream:
    """Read a stream object body; ``version`` is 1 (Redis 5/6) or 2 (Redis 7.0)."""
    s = sm.Stream()
    n_nodes = r.count(2)
    nodes: list[sm.StreamNode] = []
    for _ in range(n_nodes):
        key = r.string()
        if len(key) != 16:
            raise r.error("stream node key is not a 128 bit ID")
        lp = r.string()
        node = _build_node(r, int.from_bytes(key, "big"), lp)
        if node is not None:
            if nodes and node.master <= nodes[-1].master:
                raise r.error("stream nodes out of order")
            nodes.append(node)
    s._nodes = nodes
    s._keys = [n.master for n in nodes]
    for node in nodes[:-1]:
        node.seal()
    if nodes:
        nodes[-1].blob = bytearray(nodes[-1].blob)
    prev = -1
    ordered = True
    total = 0
    for node in nodes:
        total += node.live
        for i in range(len(node.ms)):
            sid = node.id_at(i)
            if sid <= prev:
                ordered = False
            prev = sid
    s._ordered = ordered
    s.length = r.length()
    if s.length != total:
        raise r.error("stream length does not match its entries")
    s.last_id = (r.length() << 64) | r.length()
    if version >= 2:
        s.first_id = (r.length() << 64) | r.length()
        s.max_deleted_id = (r.length() << 64) | r.length()
        s.entries_added = r.length()
    else:
        fid = s.first_live_id()
        s.first_id = 0 if fid is None else fid
        s.entries_added = s.length
    n_groups = r.count(3)
    for _ in range(n_groups):
        name = r.string()
        last_id = (r.length() << 64) | r.length()
        entries_read = r.u64_len() if version >= 2 else sm.INVALID_ENTRIES_READ
        g = s.create_group(name, last_id, entries_read)
        if g is None:
            raise r.error("duplicate consumer group name")
        if version < 2:
            g.entries_read = s.estimate_entries_read(last_id)
        n_pel = r.count(18)
        pel: dict[int, sm.PendingEntry] = {}
        for _ in range(n_pel):
            sid = int.from_bytes(r.read(16), "big")
            when = r.ms_time()
            pe = sm.PendingEntry(None, when, r.length())
            if sid in pel:
                raise r.error("duplicate ID in a consumer group PEL")
            pel[sid] = pe
            g.pel.add(sid, pe)
        n_consumers = r.count(10)
        for _ in range(n_consumers):
            cname = r.string()
            seen = r.ms_time()
            c = g.create_consumer(cname, seen)
            if c is None:
                raise r.error("duplicate consumer name")
            c.seen_time = seen
            for _ in range(r.count(16)):
                sid = int.from_bytes(r.read(16), "big")
                found = pel.get(sid)
                if found is None or found.consumer is not None:
                    raise r.error("consumer PEL entry not in the group PEL")
                found.consumer = c
                c.pel.add(sid, found)
    return s

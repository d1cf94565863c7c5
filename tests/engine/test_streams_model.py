"""The pure stream model (``streamworker.engine.model.stream``): nodes, ranges, tombstones,
trimming, consumer groups and PELs — no commands, no RESP."""

from __future__ import annotations

import gc
import random
import tracemalloc

import pytest

from streamworker.engine.ids import MAX_ID, make_id
from streamworker.engine.model.stream import (
    INVALID_ENTRIES_READ,
    Consumer,
    ConsumerGroup,
    PendingEntry,
    PendingList,
    Stream,
    StreamIDExhaustedError,
    StreamIDTooSmallError,
    StreamSeqOverflowError,
)

FV = [b"f", b"v"]


def _stream(n: int, max_entries: int = 100, max_bytes: int = 4096) -> Stream:
    s = Stream()
    for i in range(1, n + 1):
        s.append(make_id(i, 0), [b"f", b"%d" % i], max_entries, max_bytes)
    return s


def _ids(
    s: Stream, start: int = 0, end: int = MAX_ID, count: int = 0, rev: bool = False
) -> list[int]:
    return [sid >> 64 for sid, _ in s.range(start, end, count, rev)]


# --- IDs ------------------------------------------------------------------------------------


def test_auto_id_uses_the_clock_when_it_is_ahead() -> None:
    s = Stream()
    s.append(make_id(5, 3), FV)
    assert s.next_auto_id(9) == make_id(9, 0)


def test_auto_id_stays_monotonic_when_the_clock_goes_back() -> None:
    s = Stream()
    s.append(make_id(100, 7), FV)
    assert s.next_auto_id(50) == make_id(100, 8)


def test_auto_id_after_the_maximum_is_exhausted() -> None:
    s = Stream()
    s.append(MAX_ID, FV)
    with pytest.raises(StreamIDExhaustedError):
        s.next_auto_id(1)


def test_ms_star_continues_the_sequence_of_the_same_ms() -> None:
    s = Stream()
    s.append(make_id(5, 3), FV)
    assert s.resolve_explicit_id(make_id(5, 0), seq_given=False) == make_id(5, 4)
    assert s.resolve_explicit_id(make_id(6, 0), seq_given=False) == make_id(6, 0)


def test_explicit_id_not_above_the_last_is_too_small() -> None:
    s = Stream()
    s.append(make_id(5, 3), FV)
    with pytest.raises(StreamIDTooSmallError):
        s.resolve_explicit_id(make_id(5, 3), seq_given=True)
    with pytest.raises(StreamIDTooSmallError):
        s.resolve_explicit_id(make_id(4, 0), seq_given=False)


def test_ms_star_after_the_last_seq_of_that_ms_overflows() -> None:
    s = Stream()
    s.append(make_id(5, 2**64 - 1), FV)
    with pytest.raises(StreamSeqOverflowError):
        s.resolve_explicit_id(make_id(5, 0), seq_given=False)


def test_deleted_ids_are_never_reused() -> None:
    s = Stream()
    s.append(make_id(5, 0), FV)
    s.delete(make_id(5, 0))
    with pytest.raises(StreamIDTooSmallError):
        s.resolve_explicit_id(make_id(5, 0), seq_given=True)


# --- appending and nodes --------------------------------------------------------------------


def test_append_updates_length_counters_and_first_id() -> None:
    s = _stream(3)
    assert (s.length, s.entries_added, s.last_id, s.first_id) == (
        3,
        3,
        make_id(3, 0),
        make_id(1, 0),
    )


def test_a_new_node_opens_after_max_entries() -> None:
    assert _stream(100).node_count == 1
    assert _stream(101).node_count == 2
    assert _stream(10, max_entries=3).node_count == 4


def test_a_new_node_opens_when_the_listpack_would_reach_max_bytes() -> None:
    # Redis 7.0: 4 entries of a 1000-byte value fit a 4096-byte listpack, the 5th does not.
    s = Stream()
    for i in range(1, 11):
        s.append(make_id(i, 0), [b"f", b"x" * 1000])
    assert s.node_count == 3


def test_zero_limits_mean_unlimited_nodes() -> None:
    assert _stream(500, max_entries=0, max_bytes=0).node_count == 1


def test_deleted_entries_count_towards_the_node_size() -> None:
    s = _stream(3, max_entries=3)
    s.delete(make_id(2, 0))
    s.append(make_id(4, 0), FV, 3)
    assert s.node_count == 2


def test_entries_with_other_fields_round_trip() -> None:
    s = Stream()
    s.append(make_id(1, 0), [b"a", b"1", b"b", b"2"])
    s.append(make_id(2, 0), [b"c", b"3"])
    s.append(make_id(3, 0), [b"a", b"x" * 300, b"b", b""])
    assert s.get(make_id(2, 0)) == [b"c", b"3"]
    assert s.get(make_id(3, 0)) == [b"a", b"x" * 300, b"b", b""]
    assert s.get(make_id(1, 0)) == [b"a", b"1", b"b", b"2"]


def test_the_tail_node_is_readable_while_it_grows() -> None:
    s = Stream()
    s.append(make_id(1, 0), [b"f", b"one"])
    assert s.get(make_id(1, 0)) == [b"f", b"one"]
    assert type(s.get(make_id(1, 0))[1]) is bytes  # type: ignore[index]


# --- reading --------------------------------------------------------------------------------


def test_range_is_inclusive_and_ordered() -> None:
    s = _stream(300, max_entries=7)
    assert _ids(s, make_id(10, 0), make_id(20, 0)) == list(range(10, 21))


def test_range_reverse_and_count() -> None:
    s = _stream(300, max_entries=7)
    assert _ids(s, make_id(10, 0), make_id(20, 0), count=3, rev=True) == [20, 19, 18]


def test_range_with_start_after_end_is_empty() -> None:
    assert _ids(_stream(5), make_id(4, 0), make_id(2, 0)) == []


def test_range_skips_deleted_entries() -> None:
    s = _stream(10, max_entries=3)
    for i in (2, 3, 4, 9):
        s.delete(make_id(i, 0))
    assert _ids(s) == [1, 5, 6, 7, 8, 10]
    assert _ids(s, rev=True) == [10, 8, 7, 6, 5, 1]


def test_range_returns_field_value_lists() -> None:
    s = _stream(2)
    assert s.range(0, MAX_ID) == [(make_id(1, 0), [b"f", b"1"]), (make_id(2, 0), [b"f", b"2"])]


def test_exists_and_get_ignore_deleted_entries() -> None:
    s = _stream(3)
    s.delete(make_id(2, 0))
    assert not s.exists(make_id(2, 0))
    assert s.get(make_id(2, 0)) is None
    assert s.get(make_id(3, 0)) == [b"f", b"3"]


def test_first_and_last_live_ids_skip_tombstones() -> None:
    s = _stream(10, max_entries=3)
    s.delete(make_id(1, 0))
    s.delete(make_id(10, 0))
    assert (s.first_live_id(), s.last_live_id()) == (make_id(2, 0), make_id(9, 0))


# --- deleting and trimming -------------------------------------------------------------------


def test_deleting_the_last_live_entry_of_a_node_drops_the_node() -> None:
    s = _stream(6, max_entries=3)
    for i in (4, 5, 6):
        s.delete(make_id(i, 0))
    assert s.node_count == 1


def test_delete_of_a_missing_or_deleted_id_is_false() -> None:
    s = _stream(3)
    assert s.delete(make_id(2, 0))
    assert not s.delete(make_id(2, 0))
    assert not s.delete(make_id(9, 0))


def test_exact_maxlen_trim_flags_entries_inside_a_node() -> None:
    s = _stream(10)
    assert s.trim_maxlen(4) == 6
    assert (_ids(s), s.node_count, s.first_id) == ([7, 8, 9, 10], 1, make_id(7, 0))


def test_approximate_trim_removes_whole_nodes_only() -> None:
    s = _stream(10, max_entries=3)  # nodes: 1-3, 4-6, 7-9, 10
    assert s.trim_maxlen(5, approx=True) == 3
    assert _ids(s) == [4, 5, 6, 7, 8, 9, 10]


def test_approximate_trim_stops_at_the_limit() -> None:
    s = _stream(10, max_entries=3)
    assert s.trim_maxlen(0, approx=True, limit=5) == 3
    assert s.length == 7


def test_trim_to_zero_keeps_an_empty_stream() -> None:
    s = _stream(10, max_entries=3)
    assert s.trim_maxlen(0) == 10
    assert (s.length, s.node_count, s.first_id, s.last_id) == (0, 0, 0, make_id(10, 0))


def test_minid_trim_removes_entries_below_the_id() -> None:
    s = _stream(10, max_entries=3)
    assert s.trim_minid(make_id(5, 0)) == 4
    assert _ids(s)[0] == 5


def test_approximate_minid_trim_keeps_the_node_holding_the_id() -> None:
    s = _stream(10, max_entries=3)
    assert s.trim_minid(make_id(5, 0), approx=True) == 3
    assert _ids(s)[0] == 4


def test_trimming_does_not_touch_max_deleted_id() -> None:
    s = _stream(5)
    s.trim_maxlen(1)
    assert s.max_deleted_id == 0


# --- unordered streams (XSETID below a tombstone) -------------------------------------------


def test_an_id_repeated_after_setid_is_found_live() -> None:
    s = _stream(3)
    s.delete(make_id(3, 0))
    s.last_id = make_id(2, 5)  # XSETID back below the tombstone
    s.append(make_id(3, 0), [b"f", b"again"])
    assert s.get(make_id(3, 0)) == [b"f", b"again"]
    assert s.delete(make_id(3, 0))
    assert s.length == 2


def test_unordered_node_range_follows_redis_iterator_rules() -> None:
    s = _stream(3)
    s.delete(make_id(3, 0))
    s.last_id = make_id(2, 0)
    s.append(make_id(2, 7), FV)
    assert _ids(s) == [1, 2, 2]
    assert [sid for sid, _ in s.range(make_id(2, 1), MAX_ID)] == [make_id(2, 7)]


# --- consumer groups --------------------------------------------------------------------------


def _group_with_pending(n: int) -> tuple[Stream, ConsumerGroup, Consumer]:
    s = _stream(n)
    g = s.create_group(b"g", 0, 0)
    assert g is not None
    c = g.get_or_create_consumer(b"c", 1000)
    g.deliver_new([make_id(i, 0) for i in range(1, n + 1)], c, 1000)
    return s, g, c


def test_create_group_refuses_a_duplicate() -> None:
    s = Stream()
    assert s.create_group(b"g", 0, -1) is not None
    assert s.create_group(b"g", 0, -1) is None


def test_delivery_adds_to_group_and_consumer_pels() -> None:
    _, g, c = _group_with_pending(3)
    assert list(g.pel) == list(c.pel) == [make_id(i, 0) for i in (1, 2, 3)]
    assert g.pel[make_id(1, 0)] is c.pel[make_id(1, 0)]


def test_redelivery_moves_the_entry_and_resets_its_count() -> None:
    _, g, c = _group_with_pending(2)
    pe = g.pel[make_id(1, 0)]
    pe.delivery_count = 5
    d = g.get_or_create_consumer(b"d", 2000)
    g.deliver(make_id(1, 0), d, 2000)
    assert (pe.consumer, pe.delivery_count, pe.delivery_time) == (d, 1, 2000)
    assert make_id(1, 0) not in c.pel


def test_ack_removes_from_both_pels() -> None:
    _, g, c = _group_with_pending(2)
    assert g.ack(make_id(1, 0))
    assert not g.ack(make_id(1, 0))
    assert list(g.pel) == list(c.pel) == [make_id(2, 0)]


def test_delete_consumer_drops_its_pending_entries() -> None:
    _, g, _ = _group_with_pending(3)
    assert g.delete_consumer(b"c") == 3
    assert len(g.pel) == 0
    assert g.delete_consumer(b"c") is None


def test_lookup_consumer_refreshes_seen_time_only_when_asked() -> None:
    g = ConsumerGroup(b"g", 0, -1)
    g.create_consumer(b"c", 100)
    assert g.lookup_consumer(b"c").seen_time == 100  # type: ignore[union-attr]
    g.lookup_consumer(b"c", 250)
    assert g.consumers[b"c"].seen_time == 250


def test_sorted_consumers_and_groups_use_byte_order() -> None:
    s = Stream()
    for name in (b"b", b"a", b"B"):
        s.create_group(name, 0, -1)
    assert [g.name for g in s.sorted_groups()] == [b"B", b"a", b"b"]


def test_lag_is_exact_with_a_valid_counter_and_no_tombstones() -> None:
    s = _stream(5)
    g = s.create_group(b"g", make_id(2, 0), 2)
    assert g is not None
    assert s.group_lag(g) == 3


def test_lag_is_unknown_with_a_tombstone_after_the_group() -> None:
    s = _stream(5)
    s.delete(make_id(4, 0))
    s.max_deleted_id = make_id(4, 0)
    g = s.create_group(b"g", make_id(2, 0), INVALID_ENTRIES_READ)
    assert g is not None
    assert s.group_lag(g) is None


def test_lag_is_estimated_at_the_ends_without_a_counter() -> None:
    s = _stream(5)
    s.trim_maxlen(3)
    at_end = s.create_group(b"end", s.last_id, INVALID_ENTRIES_READ)
    before = s.create_group(b"zero", 0, INVALID_ENTRIES_READ)
    assert at_end is not None
    assert before is not None
    assert s.group_lag(at_end) == 0
    assert s.group_lag(before) == 3


def test_advance_group_counts_reads() -> None:
    s = _stream(3)
    g = s.create_group(b"g", 0, 0)
    assert g is not None
    s.advance_group(g, make_id(1, 0))
    assert (g.entries_read, g.last_id) == (1, make_id(1, 0))


def test_copy_is_deep() -> None:
    s, g, _ = _group_with_pending(3)
    t = s.copy()
    t.delete(make_id(1, 0))
    t.groups[b"g"].ack(make_id(2, 0))
    assert s.length == 3
    assert len(g.pel) == 3
    assert t.range(0, MAX_ID) == s.range(make_id(2, 0), MAX_ID)


# --- PendingList -----------------------------------------------------------------------------


def test_pending_list_keeps_id_order_under_random_inserts() -> None:
    pl = PendingList()
    ids = [(i * 7919) % 5003 for i in range(5003)]
    for i in ids:
        pl.add(i, PendingEntry(None, 0))
    assert list(pl) == sorted(ids)
    for i in ids[::2]:
        pl.pop(i)
    assert list(pl) == sorted(ids[1::2])
    assert (pl.first(), pl.last(), len(pl)) == (min(ids[1::2]), max(ids[1::2]), len(ids[1::2]))


def test_pending_list_irange_and_ceiling() -> None:
    pl = PendingList()
    pl.add_ascending(list(range(0, 3000, 3)), [PendingEntry(None, 0) for _ in range(1000)])
    assert list(pl.irange(10, 20)) == [12, 15, 18]
    assert pl.ceiling(10) == 12
    assert pl.ceiling(3000) is None


# --- bulk paths (range_reply, ack_many) -------------------------------------------------------


def _random_stream(rng: random.Random, n: int) -> Stream:
    s = Stream()
    names = [[b"a", b"b"], [b"a", b"b"], [b"a", b"b"], [b"x"], [b"a", b"b", b"c"]]
    max_entries = rng.choice([3, 10, 100])
    for i in range(1, n + 1):
        fields = rng.choice(names)
        fv: list[bytes] = []
        for f in fields:
            size = rng.choice([4, 4, 4, 4, 0, 7, 300])
            fv += [f, bytes([0x30 + i % 10]) * size]
        s.append(make_id(i // 3, i % 3), fv, max_entries)
    for sid in rng.sample(range(1, n + 1), n // 5):
        s.delete(make_id(sid // 3, sid % 3))
    return s


def test_range_reply_matches_range() -> None:
    rng = random.Random(7)
    for _ in range(40):
        n = rng.randrange(1, 400)
        s = _random_stream(rng, n)
        for _ in range(30):
            start = make_id(rng.randrange(0, n // 3 + 2), rng.randrange(0, 3))
            end = rng.choice([MAX_ID, make_id(rng.randrange(0, n // 3 + 2), rng.randrange(0, 3))])
            count = rng.choice([0, 1, 2, 10, 100])
            sids: list[int] = []
            expected = s.range(start, end, count)
            assert s.range_reply(start, end, count, sids) == [
                [b"%d-%d" % (sid >> 64, sid & ((1 << 64) - 1)), fv] for sid, fv in expected
            ]
            assert sids == [sid for sid, _ in expected]


def _pel_state(g: ConsumerGroup) -> list[object]:
    out: list[object] = [list(g.pel), sorted(g.pel._d)]
    for c in g.sorted_consumers():
        out += [c.name, list(c.pel), sorted(c.pel._d)]
        out += [(sid, pe.consumer.name if pe.consumer else None) for sid, pe in c.pel.items()]
    return out


def test_ack_many_matches_ack_one_by_one() -> None:
    rng = random.Random(11)
    for _ in range(60):
        s = _stream(1)
        g = s.create_group(b"g", 0, 0)
        assert g is not None
        consumers = [g.get_or_create_consumer(name, 0) for name in (b"c1", b"c2", b"c3")]
        n = rng.randrange(1, 3000)
        i = 1
        while i <= n:
            batch = list(range(i, min(n + 1, i + rng.randrange(1, 200))))
            g.deliver_new([make_id(x, 0) for x in batch], rng.choice(consumers), 5)
            i = batch[-1] + 1
        for _ in range(10):
            k = rng.randrange(0, 300)
            lo = rng.randrange(1, n + 1)
            sids = [make_id(lo + j, 0) for j in range(k)]
            if rng.random() < 0.3:
                sids += rng.sample(sids, min(3, len(sids)))
            if rng.random() < 0.3:
                rng.shuffle(sids)
            twin = g.copy()
            expected = sum(twin.ack(sid) for sid in sids)
            assert g.ack_many(sids) == expected
            assert _pel_state(g) == _pel_state(twin)


def test_add_ascending_into_an_emptied_pending_list_appends() -> None:
    pl = PendingList()
    pl.add_ascending([1, 2, 3], [PendingEntry(None, 0) for _ in range(3)])
    for sid in (1, 2, 3):
        pl.pop(sid)
    pl.add_ascending(list(range(10, 3000)), [PendingEntry(None, 0) for _ in range(10, 3000)])
    assert list(pl) == list(range(10, 3000))
    assert pl.first() == 10
    assert pl.last() == 2999
    assert list(pl.irange(1500, 1502)) == [1500, 1501, 1502]


# --- memory -----------------------------------------------------------------------------------


def test_small_entries_cost_well_under_250_bytes_each() -> None:
    n = 50_000
    gc.collect()
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        s = Stream()
        for i in range(n):
            fv = [
                b"field_one!",
                b"v%09d" % i,
                b"field_two!",
                b"w%09d" % i,
                b"field_thr!",
                b"x%09d" % i,
            ]
            s.append(make_id(1_700_000_000_000 + i // 50, i % 50), fv)
        del fv
        gc.collect()
        used = tracemalloc.get_traced_memory()[0] - before
    finally:
        tracemalloc.stop()
    assert s.length == n
    assert used / n <= 250

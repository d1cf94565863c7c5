"""The dashboard's read side against a real redis-server 7.0 and the embedded engine: what it
reports equals what XINFO/XPENDING say, long lists come a page at a time, values are made safe."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import TypeVar

import pytest
import redis.asyncio as aioredis

from streamworker.dashboard import data
from streamworker.io.redisio import open_redis
from tests.dashboard.conftest import BINARY, HOSTILE, Scene, Store, build_scene

T = TypeVar("T")


def run(store: Store, make: Callable[[aioredis.Redis], Awaitable[T]]) -> T:
    """Run ``make(client)`` with a fresh asyncio client on ``store``."""

    async def go() -> T:
        client = open_redis(store.url)
        try:
            return await make(client)
        finally:
            await client.aclose()

    return asyncio.run(go())


def test_stream_summaries_equal_xinfo_stream(store: Store, scene: Scene) -> None:
    streams, cut = run(store, data.list_streams)
    assert not cut
    by_name = {s.name: s for s in streams}
    assert set(by_name) == {"orders", scene.dlq}
    for name, summary in by_name.items():
        info = store.client.xinfo_stream(name)
        assert summary.length == info["length"]
        assert summary.groups == info["groups"]
        assert summary.first_id == info["first-entry"][0].decode()
        assert summary.last_id == info["last-entry"][0].decode()
    assert by_name[scene.dlq].is_dead_letter
    assert not by_name["orders"].is_dead_letter


def test_group_summaries_equal_xinfo_groups(store: Store, scene: Scene) -> None:
    groups = run(store, lambda c: data.list_groups(c, "orders"))
    raw = {g["name"].decode(): g for g in store.client.xinfo_groups("orders")}
    assert [g.name for g in groups] == ["audit", "billing"]
    for g in groups:
        assert g.pending == raw[g.name]["pending"]
        assert g.consumers == raw[g.name]["consumers"]
        assert g.lag == raw[g.name]["lag"]
        assert g.last_delivered_id == raw[g.name]["last-delivered-id"].decode()
    assert groups[1].pending == store.client.xpending("orders", "billing")["pending"] == 4


def test_pending_is_read_one_page_at_a_time(store: Store) -> None:
    build_scene(store.client, extra=230)
    store.client.xreadgroup("billing", "bulk", {"orders": ">"}, count=1000)
    total = store.client.xpending("orders", "billing")["pending"]
    assert total == 234
    seen: list[str] = []
    after = None
    pages = 0
    while True:
        cursor = after
        page = run(
            store,
            lambda c, cursor=cursor: data.pending_page(  # type: ignore[misc]
                c, "orders", "billing", after=cursor, count=100
            ),
        )
        assert len(page.items) <= 100
        seen += [p.id for p in page.items]
        pages += 1
        if page.next_cursor is None:
            break
        after = page.next_cursor
    assert pages == 3
    assert len(seen) == len(set(seen)) == total
    assert seen == sorted(seen, key=lambda i: tuple(int(x) for x in i.split("-")))


def test_a_page_never_exceeds_the_maximum_size(store: Store) -> None:
    build_scene(store.client, extra=600)
    page = run(store, lambda c: data.entries_page(c, "orders", count=100_000))
    assert len(page.items) == data.MAX_PAGE_SIZE
    assert page.next_cursor == page.items[-1].id


def test_entries_come_newest_first_and_page_backwards(store: Store, scene: Scene) -> None:
    first = run(store, lambda c: data.entries_page(c, "orders", count=5))
    assert [e.id for e in first.items] == [i.decode() for i in reversed(scene.ids[3:])]
    rest = run(store, lambda c: data.entries_page(c, "orders", before=first.next_cursor, count=5))
    assert [e.id for e in rest.items] == [i.decode() for i in reversed(scene.ids[:3])]
    assert rest.next_cursor is None


def test_pending_rows_carry_delivery_counts(store: Store, scene: Scene) -> None:
    store.client.xclaim("orders", "billing", "c1", 0, [scene.ids[0]])  # a second delivery
    page = run(store, lambda c: data.pending_page(c, "orders", "billing", consumer="c1"))
    raw = store.client.xpending_range("orders", "billing", "-", "+", 10, consumername="c1")
    assert [(p.id, p.deliveries) for p in page.items] == [
        (r["message_id"].decode(), r["times_delivered"]) for r in raw
    ]
    assert page.items[0].deliveries == 2


def test_dead_letters_split_into_original_fields_and_provenance(store: Store, scene: Scene) -> None:
    page = run(store, lambda c: data.dead_letter_page(c, scene.dlq))
    assert [d.id for d in page.items] == [i.decode() for i in reversed(scene.dead)]
    hostile = page.items[0]
    assert [(k.shown, v.shown) for k, v in hostile.fields] == [("n", "5"), ("note", HOSTILE)]
    assert hostile.original_stream == "orders"
    assert hostile.original_id == scene.ids[5].decode()
    assert hostile.provenance["dlq_consumer"] == "c2"
    assert hostile.error.shown == "KeyError: " + HOSTILE
    assert hostile.replayable
    binary = page.items[2]
    assert binary.fields[1][1].binary
    assert binary.fields[1][1].shown == BINARY.hex(" ")


def test_a_missing_stream_or_group_is_not_found(store: Store, scene: Scene) -> None:
    with pytest.raises(data.NotFound):
        run(store, lambda c: data.stream_summary(c, "nope"))
    with pytest.raises(data.NotFound):
        run(store, lambda c: data.get_group(c, "orders", "nope"))
    with pytest.raises(data.NotFound):
        run(store, lambda c: data.pending_page(c, "nope", "billing"))
    with pytest.raises(data.NotFound):
        run(store, lambda c: data.get_entry(c, "orders", "not-an-id"))


def test_utf8_text_is_shown_as_is() -> None:
    v = data.show_value("grüße <b>".encode())
    assert (v.shown, v.binary, v.truncated) == ("grüße <b>", False, False)


def test_binary_and_control_characters_are_shown_as_hex() -> None:
    assert data.show_value(b"\xff\x00").shown == "ff 00"
    assert data.show_value(b"\xff\x00").binary
    assert data.show_value(b"ab\x1b[31m").binary  # a terminal escape is not text


def test_long_values_are_cut_and_the_size_kept() -> None:
    v = data.show_value(b"x" * 1000, limit=200)
    assert (len(v.shown), v.truncated, v.size) == (200, True, 1000)
    whole = data.show_value(b"x" * 1000, limit=None)
    assert (len(whole.shown), whole.truncated) == (1000, False)
    hexed = data.show_value(b"\xff" * 1000, limit=200)
    assert hexed.truncated
    assert hexed.shown.count("ff") == 100

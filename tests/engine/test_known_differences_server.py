"""Known differences that show only over a socket (the engine's RESP server beside a
redis-server 7.0.15 of the module's own): each a strict xfail, as in test_known_differences.py,
listed in docs/engine.md."""

from __future__ import annotations

import re
from collections.abc import Iterator

import pytest

from tests.engine.admin_support import Conn, Pair, pair_fixture

pytestmark = pytest.mark.redis


@pytest.fixture(scope="module")
def pair(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Pair]:
    yield from pair_fixture(tmp_path_factory.mktemp("differences"))


def _query_buffer(conn: Conn, name: str) -> int:
    """qbuf + qbuf-free of the client called ``name`` in CLIENT LIST."""
    listing = conn.call("CLIENT", "LIST").decode()
    line = next(x for x in listing.splitlines() if f"name={name} " in x)
    qbuf = re.search(r" qbuf=(\d+)", line)
    free = re.search(r" qbuf-free=(\d+)", line)
    assert qbuf is not None
    assert free is not None
    return int(qbuf.group(1)) + int(free.group(1))


@pytest.mark.xfail(
    strict=True,
    reason="the engine reads requests through a fixed 16 KB buffer and reports that; Redis "
    "grows a client's query buffer to its largest request and shrinks it later (Redis's "
    "unit/querybuf tests this allocator-shaped sizing)",
)
def test_a_large_request_grows_the_clients_query_buffer(pair: Pair) -> None:
    sizes = {}
    for side, port in pair.ports.items():
        client, observer = Conn(port), Conn(port)
        try:
            client.call("CLIENT", "SETNAME", "big")
            client.call("SET", "x", "A" * 400_000)
            sizes[side] = _query_buffer(observer, "big")
        finally:
            client.close()
            observer.close()
    assert sizes["redis"] > 32768
    assert sizes["engine"] > 32768


@pytest.mark.xfail(
    strict=True,
    reason="the engine's memory is Python's, not jemalloc's: INFO says so, and Redis's tests "
    "that only run on jemalloc (type/string's 'trim on SET with big value') skip it",
)
def test_info_memory_names_jemalloc_as_the_allocator(pair: Pair) -> None:
    replies = pair.both("INFO", "memory")
    allocators = {
        side: re.search(rb"mem_allocator:(\S+)", reply) for side, reply in replies.items()
    }
    assert allocators["redis"] is not None
    assert allocators["redis"].group(1).startswith(b"jemalloc")
    assert allocators["engine"] is not None
    assert allocators["engine"].group(1).startswith(b"jemalloc")

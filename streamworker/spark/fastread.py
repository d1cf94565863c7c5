"""Reading an id range of a stream as Arrow record batches, fast (redis-py and pyarrow; no Spark
import, so it is measured and tested without a JVM).

Two things make it fast, both measured by ``benchmarks/spark_bench.py``:

* **Pipelined pages.** Paging ``XRANGE key (last hi COUNT n`` is sequential (each page starts
  after the previous one's last id), but the next request can go out as soon as a page has
  arrived, before that page is converted: Redis produces page N+1 while this process decodes
  page N. :func:`raw_pages` does that on one connection (send, then read the earlier reply).
* **Bulk decoding.** The replies are taken raw from the parser (hiredis: nested lists of bytes,
  without redis-py's per-entry dicts) and turned into Arrow arrays column by column: the ids by
  one array build, ``ms``/``seq`` by Arrow's string split and cast, the field maps from flat key
  and value lists plus offsets. No Python object per row is made beyond what the parser made.
"""

from __future__ import annotations

from collections.abc import Iterator
from itertools import accumulate, chain
from typing import Any

import redis
import redis.exceptions as rex

from streamworker.errors import StreamworkerError
from streamworker.spark.ranges import IdRange

RawPage = list[list[Any]]
"""One XRANGE reply as the parser gives it: ``[[id, [field, value, ...]], ...]`` (bytes)."""


def raw_pages(client: redis.Redis, stream: str, rng: IdRange, page_size: int) -> Iterator[RawPage]:
    """Every entry of ``rng`` as raw XRANGE pages, in id order, with the next page requested
    before the current one is handed out (one request in flight on one connection).

    ``client`` must be a plain (non-cluster) client of the node that serves ``stream``. The
    connection goes back to the pool when the iterator ends; an iterator abandoned with a
    request in flight drops its connection instead (its reply would confuse the next user).
    """
    if page_size < 1:
        raise ValueError(f"page_size must be >= 1, got {page_size}")
    high = rng.xrange_max
    pool = client.connection_pool
    conn: Any = pool.get_connection()
    in_flight = False
    try:
        conn.send_command("XRANGE", stream, rng.xrange_min, high, "COUNT", page_size)
        in_flight = True
        while True:
            page = conn.read_response()
            in_flight = False
            if isinstance(page, rex.ResponseError):
                raise page
            if not page:
                return
            if len(page) >= page_size:
                conn.send_command("XRANGE", stream, b"(" + page[-1][0], high, "COUNT", page_size)
                in_flight = True
            yield page
            if not in_flight:
                return
    except rex.MovedError as exc:
        raise StreamworkerError(
            f"stream {stream!r} moved to another cluster node while it was read ({exc}); "
            f"Spark retries the task with a fresh slot map"
        ) from exc
    finally:
        if in_flight:
            conn.disconnect()
        pool.release(conn)


def _strings(values: list[bytes], pa: Any) -> Any:
    """A string array of UTF-8 ``values``; invalid bytes are replaced (U+FFFD), as the worker
    decodes field names."""
    try:
        return pa.array(values, pa.string())
    except (pa.ArrowInvalid, pa.ArrowTypeError):
        return pa.array([v.decode("utf-8", "replace") for v in values], pa.string())


class BatchBuilder:
    """Turns raw pages of one stream into record batches of ``schema`` (the Arrow form of the
    source's Spark schema: ``stream, id, ms, seq, timestamp, fields``, ``fields`` a map of
    string to binary or to string). Picklable: holds only the stream name and the schema."""

    def __init__(self, stream: str, schema: Any) -> None:
        import pyarrow as pa

        self.stream = stream
        self.schema = schema
        fields_type = schema.field("fields").type
        self.fields_type = fields_type
        self.text_values = pa.types.is_string(fields_type.item_type)
        self.ts_type = schema.field("timestamp").type

    def batch(self, page: RawPage) -> Any:
        """One record batch holding ``page``'s entries."""
        import pyarrow as pa
        import pyarrow.compute as pc

        n = len(page)
        ids = pa.array([e[0] for e in page], pa.string())
        parts = pc.split_pattern(ids, "-", max_splits=1)
        ms = pc.cast(pc.list_element(parts, 0), pa.int64())
        seq = pc.cast(pc.list_element(parts, 1), pa.int64())
        timestamp = pc.multiply(ms, 1_000).cast(self.ts_type)
        flats = [e[1] for e in page]
        flat = list(chain.from_iterable(flats))
        # Offsets count pairs: half the running total of flat items.
        offsets = pc.shift_right(pa.array([0, *accumulate(map(len, flats))], pa.int32()), 1)
        keys = _strings(flat[0::2], pa)
        values = _strings(flat[1::2], pa) if self.text_values else pa.array(flat[1::2], pa.binary())
        fields = pa.MapArray.from_arrays(offsets, keys, values, type=self.fields_type)
        stream = pa.array([self.stream] * n, pa.string())
        return pa.RecordBatch.from_arrays(
            [stream, ids, ms, seq, timestamp, fields], schema=self.schema
        )

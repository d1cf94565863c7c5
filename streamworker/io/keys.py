"""Every Redis key name streamworker derives from a user's stream name.

Keys that one Lua script touches must live in one Redis Cluster slot, so derived keys reuse the
stream's hash tag: a stream ``orders`` becomes ``{orders}`` inside derived names, and a stream that
already carries a tag (``{shop}:orders``) keeps it.
"""

from __future__ import annotations


def hash_tag(key: str) -> str | None:
    """The hash tag Redis Cluster would hash for ``key`` (the text inside the first ``{…}``), if any."""
    start = key.find("{")
    if start == -1:
        return None
    end = key.find("}", start + 1)
    if end == -1 or end == start + 1:
        return None
    return key[start + 1 : end]


def dead_letter_stream(stream: str) -> str:
    """The default dead-letter stream of ``stream``: ``{S}:dlq``, or ``S:dlq`` when S has a tag."""
    if hash_tag(stream) is not None:
        return f"{stream}:dlq"
    return f"{{{stream}}}:dlq"


def in_stream_slot(stream: str, suffix: str) -> str:
    """A key named after ``stream`` that hashes to the stream's Redis Cluster slot: ``{S}:suffix``,
    or ``S:suffix`` when S already carries a hash tag (``{orders:p3}:suffix``). Use it for the
    keys an ``idempotency="lua"`` handler's effects write."""
    if hash_tag(stream) is not None:
        return f"{stream}:{suffix}"
    return f"{{{stream}}}:{suffix}"


def partition_stream(stream: str, index: int) -> str:
    """The key of partition ``index`` of the partitioned stream ``stream``: ``{S:pN}``.

    Each partition is its own hash tag, so the partitions spread over a cluster's slots while a
    partition's derived keys (``{S:pN}:dlq``, ``{S:pN}:lease:G``, ``{S:pN}:dedup:G``) stay in
    its slot.
    """
    return f"{{{stream}:p{index}}}"


def dedup_record_key(stream: str, group: str) -> str:
    """The business-key record of ``group`` on ``stream`` (``idempotency="lua"`` with
    ``dedup_field``): ``{S}:dedup:G``, or ``S:dedup:G`` when S already carries a hash tag, so
    that it hashes to the stream's slot."""
    return in_stream_slot(stream, f"dedup:{group}")


def lease_key(stream: str, group: str) -> str:
    """The ordering lease of ``group`` on ``stream`` (``ordered=True``): ``{S}:lease:G``, or
    ``S:lease:G`` when S has a tag; in the stream's slot."""
    return in_stream_slot(stream, f"lease:{group}")


def consumer_name_key(stream: str, group: str, consumer: str) -> str:
    """The record of which live process owns ``consumer`` in ``group`` on ``stream``:
    ``{S}:consumer:G:NAME``, or ``S:consumer:G:NAME`` when S has a tag; in the stream's slot.
    A hash (token, host, pid, started_at_ms, …) with a time to live, renewed while it runs."""
    return in_stream_slot(stream, f"consumer:{group}:{consumer}")


def published_marker_key(stream: str, idempotency_key: str) -> str:
    """The marker of a publish with ``idempotency_key`` to ``stream`` (``publish_once.lua``):
    ``{S}:published:KEY``, or ``S:published:KEY`` when S has a tag; in the stream's slot."""
    return in_stream_slot(stream, f"published:{idempotency_key}")


def delayed_key(stream: str) -> str:
    """The sorted set of ``stream``'s delayed entries (``delay_ms``/``deliver_at``; see
    :mod:`streamworker.producing.delayed`): ``{S}:delayed``, or ``S:delayed`` when S has a tag (a
    partition ``{S:pN}`` has its own); in the stream's slot. Score: the due time in epoch ms."""
    return in_stream_slot(stream, "delayed")


def rate_limit_key(stream: str, group: str) -> str:
    """The shared rate limit of ``group``'s handler on ``stream`` (``rate_limit=``; see
    ``lua/take_permits.lua``): ``{S}:rate:G``, or ``S:rate:G`` when S has a tag; in the stream's
    slot. For a partitioned stream, S is the logical stream: one limit over all partitions."""
    return in_stream_slot(stream, f"rate:{group}")


def rate_pause_key(stream: str, group: str) -> str:
    """The pause of ``group``'s handler on ``stream`` after a handler raised ``RateLimited``:
    ``{S}:rate:G:pause``, beside :func:`rate_limit_key` (same slot); it lives as long as the
    pause."""
    return in_stream_slot(stream, f"rate:{group}:pause")


def spark_cursors_key(stream: str) -> str:
    """The hash of the Spark cursors of ``stream`` (field: cursor name, value: the last id that
    reader has committed): ``{S}:spark:cursors``. Trims and ``retention="acked"`` keep what a
    cursor has not passed."""
    return in_stream_slot(stream, "spark:cursors")

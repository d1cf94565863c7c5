"""The ``idempotency="sql"`` schema: the processed-messages and outbox tables, the names of every table
streamworker creates, and the stored form of stream ids (:func:`sortable_id`).

No I/O: the table is created by ``streamworker migrate`` (:mod:`streamworker.idempotency.sql.migrate`).
"""

from __future__ import annotations

import sqlalchemy as sa

TABLE_NAME = "streamworker_processed_messages"
"""The processed-messages table."""

VERSION_TABLE = "streamworker_alembic_version"
"""Alembic's version table for streamworker's own migrations (kept apart from an application's
``alembic_version``)."""

OUTBOX_TABLE = "streamworker_outbox"
"""The transactional outbox's table (:mod:`streamworker.idempotency.sql.outbox`)."""

TABLE_NAMES = frozenset({TABLE_NAME, VERSION_TABLE, OUTBOX_TABLE})
"""Every table streamworker creates; filter them out of your own Alembic autogenerate."""

metadata = sa.MetaData()
"""The MetaData holding :data:`processed_messages` and :data:`outbox` (what ``streamworker
migrate`` creates, whichever modules were imported); include it in your own Alembic
``target_metadata`` if your migrations, not ``streamworker migrate``, should own the table."""

processed_messages = sa.Table(
    TABLE_NAME,
    metadata,
    sa.Column("group_name", sa.String(255), nullable=False),
    sa.Column("stream", sa.String(512), nullable=False),
    # sortable_id(): "<ms>-<seq>", both zero-padded to 20 digits, so ids compare as strings.
    sa.Column("message_id", sa.String(41), nullable=False),
    sa.Column("consumer", sa.String(255), nullable=False),
    sa.Column(
        "processed_at",
        sa.DateTime(timezone=True),
        nullable=False,
        server_default=sa.func.current_timestamp(),
    ),
    # The claim's ON CONFLICT target, and the index that pruning's range delete walks.
    sa.PrimaryKeyConstraint(
        "group_name", "stream", "message_id", name="pk_streamworker_processed_messages"
    ),
    sqlite_with_rowid=False,
)
"""One row per (group, stream, message) whose effects committed."""

_ID_WIDTH = 20  # digits of 2**64 - 1, the largest ms or seq part of a stream id


def sortable_id(entry_id: str) -> str:
    """``"1700000000000-3"`` -> ``"00000001700000000000-00000000000000000003"``: stored form whose
    string order is the stream's id order. Raises ValueError for anything that is not an id."""
    ms, sep, seq = entry_id.partition("-")
    if not sep or not ms.isdigit() or not seq.isdigit():
        raise ValueError(f"not a stream entry id: {entry_id!r}")
    if ms.isascii() and seq.isascii() and len(ms) <= _ID_WIDTH and len(seq) <= _ID_WIDTH:
        # The usual id: padding the digits as they are gives the same text, three times faster
        # (this runs for every message of an idempotency="sql" batch).
        return ms.zfill(_ID_WIDTH) + "-" + seq.zfill(_ID_WIDTH)
    return f"{int(ms):0{_ID_WIDTH}d}-{int(seq):0{_ID_WIDTH}d}"


def stream_id(stored: str) -> str:
    """The inverse of :func:`sortable_id`."""
    ms, _, seq = stored.partition("-")
    if ms.isascii() and ms.isdigit() and seq.isascii() and seq.isdigit():
        return (ms.lstrip("0") or "0") + "-" + (seq.lstrip("0") or "0")
    return f"{int(ms)}-{int(seq)}"  # raises ValueError for what is not a stored id


outbox = sa.Table(
    OUTBOX_TABLE,
    metadata,
    sa.Column(
        "id",
        sa.BigInteger().with_variant(sa.Integer(), "sqlite"),
        primary_key=True,
        autoincrement=True,
    ),
    sa.Column("stream", sa.String(512), nullable=False),
    sa.Column("publish_key", sa.String(255), nullable=False),
    sa.Column("fields", sa.Text(), nullable=False),
    sa.Column("trim", sa.String(6), nullable=False, server_default=""),
    sa.Column("threshold", sa.String(41), nullable=False, server_default=""),
    sa.Column("approximate", sa.Boolean(), nullable=False, server_default=sa.true()),
    sa.Column(
        "created_at",
        sa.DateTime(timezone=True),
        nullable=False,
        server_default=sa.func.current_timestamp(),
    ),
)
"""One row per entry a handler staged (:func:`streamworker.idempotency.sql.outbox.publish`),
deleted once relayed."""

"""streamworker_outbox: entries a SQL handler published, waiting for the relay to add them.

Revision ID: sw0002
Revises: sw0001
Create Date: 2026-11-25
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "sw0002"
down_revision: str | None = "sw0001"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    # The table as it was at this revision (not imported from the package).
    op.create_table(
        "streamworker_outbox",
        # BIGINT on PostgreSQL; SQLite autoincrements only an INTEGER PRIMARY KEY (its rowid).
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


def downgrade() -> None:
    op.drop_table("streamworker_outbox")

"""streamworker_processed_messages: one row per message whose effects committed.

Revision ID: sw0001
Revises:
Create Date: 2025-01-01
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "sw0001"
down_revision: str | None = None
branch_labels: str | Sequence[str] | None = ("streamworker",)
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    # The table as it was at this revision (not imported from the package: later versions of the
    # package may define it differently).
    op.create_table(
        "streamworker_processed_messages",
        sa.Column("group_name", sa.String(255), nullable=False),
        sa.Column("stream", sa.String(512), nullable=False),
        sa.Column("message_id", sa.String(41), nullable=False),
        sa.Column("consumer", sa.String(255), nullable=False),
        sa.Column(
            "processed_at",
            sa.DateTime(timezone=True),
            nullable=False,
            server_default=sa.func.current_timestamp(),
        ),
        sa.PrimaryKeyConstraint(
            "group_name", "stream", "message_id", name="pk_streamworker_processed_messages"
        ),
        sqlite_with_rowid=False,
    )


def downgrade() -> None:
    op.drop_table("streamworker_processed_messages")

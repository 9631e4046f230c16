"""Host incidents resolved by a repair: resuming a node clears its repeat-offender count.

Revision ID: 0005_host_repair
Revises: 0004_attempt_exit_code
Create Date: 2026-12-02 20:05:00
"""
from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

import app.db.base

revision: str = '0005_host_repair'
down_revision: str | None = '0004_attempt_exit_code'
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table('host_incidents') as batch:
        batch.add_column(sa.Column('resolved_at', app.db.base.UTCDateTime(timezone=True), nullable=True))
        batch.add_column(sa.Column('resolved_by', sa.String(length=128), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table('host_incidents') as batch:
        batch.drop_column('resolved_by')
        batch.drop_column('resolved_at')

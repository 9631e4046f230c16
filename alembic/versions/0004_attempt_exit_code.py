"""Attempts: the scheduler's exit code (exit:signal), so the controller can tell a clean end.

Revision ID: 0004_attempt_exit_code
Revises: 0003_i10_controller
Create Date: 2026-12-02 19:40:00
"""
from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = '0004_attempt_exit_code'
down_revision: str | None = '0003_i10_controller'
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table('attempts') as batch_op:
        batch_op.add_column(sa.Column('exit_code', sa.String(length=16), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table('attempts') as batch_op:
        batch_op.drop_column('exit_code')

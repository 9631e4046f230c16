"""Batch re-labeling: relabel_runs and relabel_items (the run's checkpoint, one row per log
with its diagnosis before and after).

Revision ID: 0003_i11_relabel
Revises: 0002
Create Date: 2026-11-30 14:39:55.943059
"""
from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

import app.db.base

revision: str = '0003_i11_relabel'
down_revision: str | None = '0002'
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table('relabel_runs',
    sa.Column('id', sa.Integer(), nullable=False),
    sa.Column('source', sa.String(length=16), nullable=False),
    sa.Column('status', sa.String(length=16), nullable=False),
    sa.Column('dry_run', sa.Boolean(), nullable=False),
    sa.Column('selection', sa.JSON(), nullable=False),
    sa.Column('rules_dir', sa.Text(), nullable=True),
    sa.Column('rules_version', sa.String(length=64), nullable=True),
    sa.Column('batch_size', sa.Integer(), nullable=False),
    sa.Column('total_items', sa.Integer(), nullable=False),
    sa.Column('total_bytes', sa.BigInteger(), nullable=False),
    sa.Column('created_by', sa.String(length=128), nullable=False),
    sa.Column('finished_at', app.db.base.UTCDateTime(timezone=True), nullable=True),
    sa.Column('created_at', app.db.base.UTCDateTime(timezone=True), server_default=sa.text('(CURRENT_TIMESTAMP)'), nullable=False),
    sa.PrimaryKeyConstraint('id', name=op.f('pk_relabel_runs'))
    )
    with op.batch_alter_table('relabel_runs', schema=None) as batch_op:
        batch_op.create_index(batch_op.f('ix_relabel_runs_status'), ['status'], unique=False)

    op.create_table('relabel_items',
    sa.Column('id', sa.Integer(), nullable=False),
    sa.Column('run_id', sa.Integer(), nullable=False),
    sa.Column('status', sa.String(length=16), nullable=False),
    sa.Column('job_id', sa.Integer(), nullable=True),
    sa.Column('job_log_id', sa.Integer(), nullable=True),
    sa.Column('path', sa.Text(), nullable=True),
    sa.Column('external_id', sa.String(length=256), nullable=True),
    sa.Column('size', sa.BigInteger(), nullable=False),
    sa.Column('old_diagnosis_id', sa.Integer(), nullable=True),
    sa.Column('old_error_type', sa.String(length=64), nullable=True),
    sa.Column('old_rule_id', sa.String(length=128), nullable=True),
    sa.Column('old_rules_version', sa.String(length=64), nullable=True),
    sa.Column('human_error_type', sa.String(length=64), nullable=True),
    sa.Column('new_diagnosis_id', sa.Integer(), nullable=True),
    sa.Column('new_error_type', sa.String(length=64), nullable=True),
    sa.Column('new_category', sa.String(length=32), nullable=True),
    sa.Column('new_rule_id', sa.String(length=128), nullable=True),
    sa.Column('new_confidence', sa.Float(), nullable=True),
    sa.Column('new_versions', sa.JSON(), nullable=True),
    sa.Column('error', sa.Text(), nullable=True),
    sa.Column('runs', sa.Integer(), nullable=False),
    sa.Column('worker', sa.String(length=128), nullable=True),
    sa.Column('finished_at', app.db.base.UTCDateTime(timezone=True), nullable=True),
    sa.ForeignKeyConstraint(['job_id'], ['jobs.id'], name=op.f('fk_relabel_items_job_id_jobs'), ondelete='SET NULL'),
    sa.ForeignKeyConstraint(['job_log_id'], ['job_logs.id'], name=op.f('fk_relabel_items_job_log_id_job_logs'), ondelete='SET NULL'),
    sa.ForeignKeyConstraint(['run_id'], ['relabel_runs.id'], name=op.f('fk_relabel_items_run_id_relabel_runs'), ondelete='CASCADE'),
    sa.PrimaryKeyConstraint('id', name=op.f('pk_relabel_items'))
    )
    with op.batch_alter_table('relabel_items', schema=None) as batch_op:
        batch_op.create_index('ix_relabel_items_run_id_status', ['run_id', 'status'], unique=False)



def downgrade() -> None:
    with op.batch_alter_table('relabel_items', schema=None) as batch_op:
        batch_op.drop_index('ix_relabel_items_run_id_status')

    op.drop_table('relabel_items')
    with op.batch_alter_table('relabel_runs', schema=None) as batch_op:
        batch_op.drop_index(batch_op.f('ix_relabel_runs_status'))

    op.drop_table('relabel_runs')

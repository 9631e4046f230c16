"""Restart controller: recovery runs (history and idempotency keys), host incidents (repeat
offenders), probe runs, per-cluster action switches and the per-job lock.

Revision ID: 0003_i10_controller
Revises: 0002
Create Date: 2026-11-30 14:40:44.662824
"""
from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

import app.db.base

revision: str = '0003_i10_controller'
down_revision: str | None = '0003_i14_web_ui'
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table('controller_clusters',
    sa.Column('cluster', sa.String(length=128), nullable=False),
    sa.Column('actions_enabled', sa.Boolean(), nullable=False),
    sa.Column('node_count', sa.Integer(), nullable=True),
    sa.Column('updated_by', sa.String(length=128), nullable=False),
    sa.Column('updated_at', app.db.base.UTCDateTime(timezone=True), nullable=False),
    sa.PrimaryKeyConstraint('cluster', name=op.f('pk_controller_clusters'))
    )
    op.create_table('controller_locks',
    sa.Column('job_id', sa.Integer(), nullable=False),
    sa.Column('holder', sa.String(length=200), nullable=False),
    sa.Column('expires_at', app.db.base.UTCDateTime(timezone=True), nullable=False),
    sa.ForeignKeyConstraint(['job_id'], ['jobs.id'], name=op.f('fk_controller_locks_job_id_jobs'), ondelete='CASCADE'),
    sa.PrimaryKeyConstraint('job_id', name=op.f('pk_controller_locks'))
    )
    op.create_table('host_incidents',
    sa.Column('id', sa.Integer(), nullable=False),
    sa.Column('cluster', sa.String(length=128), nullable=False),
    sa.Column('host', sa.String(length=255), nullable=False),
    sa.Column('job_id', sa.Integer(), nullable=True),
    sa.Column('fingerprint', sa.String(length=32), nullable=False),
    sa.Column('error_type', sa.String(length=64), nullable=False),
    sa.Column('created_at', app.db.base.UTCDateTime(timezone=True), server_default=sa.text('(CURRENT_TIMESTAMP)'), nullable=False),
    sa.ForeignKeyConstraint(['job_id'], ['jobs.id'], name=op.f('fk_host_incidents_job_id_jobs'), ondelete='SET NULL'),
    sa.PrimaryKeyConstraint('id', name=op.f('pk_host_incidents'))
    )
    with op.batch_alter_table('host_incidents', schema=None) as batch_op:
        batch_op.create_index('ix_host_incidents_cluster_host', ['cluster', 'host'], unique=False)

    op.create_table('probe_runs',
    sa.Column('id', sa.Integer(), nullable=False),
    sa.Column('cluster', sa.String(length=128), nullable=False),
    sa.Column('job_id', sa.Integer(), nullable=True),
    sa.Column('hosts', sa.JSON(), nullable=False),
    sa.Column('verdict', sa.String(length=32), nullable=False),
    sa.Column('faulty', sa.JSON(), nullable=False),
    sa.Column('slow', sa.JSON(), nullable=False),
    sa.Column('duration_s', sa.Float(), nullable=False),
    sa.Column('result', sa.JSON(), nullable=False),
    sa.Column('created_at', app.db.base.UTCDateTime(timezone=True), server_default=sa.text('(CURRENT_TIMESTAMP)'), nullable=False),
    sa.ForeignKeyConstraint(['job_id'], ['jobs.id'], name=op.f('fk_probe_runs_job_id_jobs'), ondelete='SET NULL'),
    sa.PrimaryKeyConstraint('id', name=op.f('pk_probe_runs'))
    )
    with op.batch_alter_table('probe_runs', schema=None) as batch_op:
        batch_op.create_index(batch_op.f('ix_probe_runs_cluster'), ['cluster'], unique=False)
        batch_op.create_index(batch_op.f('ix_probe_runs_job_id'), ['job_id'], unique=False)

    op.create_table('recovery_runs',
    sa.Column('id', sa.Integer(), nullable=False),
    sa.Column('job_id', sa.Integer(), nullable=False),
    sa.Column('diagnosis_id', sa.Integer(), nullable=True),
    sa.Column('idempotency_key', sa.String(length=200), nullable=False),
    sa.Column('fingerprint', sa.String(length=32), nullable=False),
    sa.Column('error_type', sa.String(length=64), nullable=False),
    sa.Column('action', sa.String(length=32), nullable=False),
    sa.Column('policy_id', sa.String(length=64), nullable=False),
    sa.Column('last_step', sa.Integer(), nullable=True),
    sa.Column('retry_number', sa.Integer(), nullable=False),
    sa.Column('dry_run', sa.Boolean(), nullable=False),
    sa.Column('status', sa.String(length=16), nullable=False),
    sa.Column('reason', sa.Text(), nullable=False),
    sa.Column('plan', sa.JSON(), nullable=False),
    sa.Column('outcome', sa.JSON(), nullable=False),
    sa.Column('created_at', app.db.base.UTCDateTime(timezone=True), server_default=sa.text('(CURRENT_TIMESTAMP)'), nullable=False),
    sa.ForeignKeyConstraint(['diagnosis_id'], ['diagnoses.id'], name=op.f('fk_recovery_runs_diagnosis_id_diagnoses'), ondelete='SET NULL'),
    sa.ForeignKeyConstraint(['job_id'], ['jobs.id'], name=op.f('fk_recovery_runs_job_id_jobs'), ondelete='CASCADE'),
    sa.PrimaryKeyConstraint('id', name=op.f('pk_recovery_runs')),
    sa.UniqueConstraint('idempotency_key', name=op.f('uq_recovery_runs_idempotency_key'))
    )
    with op.batch_alter_table('recovery_runs', schema=None) as batch_op:
        batch_op.create_index(batch_op.f('ix_recovery_runs_fingerprint'), ['fingerprint'], unique=False)
        batch_op.create_index(batch_op.f('ix_recovery_runs_job_id'), ['job_id'], unique=False)



def downgrade() -> None:
    with op.batch_alter_table('recovery_runs', schema=None) as batch_op:
        batch_op.drop_index(batch_op.f('ix_recovery_runs_job_id'))
        batch_op.drop_index(batch_op.f('ix_recovery_runs_fingerprint'))

    op.drop_table('recovery_runs')
    with op.batch_alter_table('probe_runs', schema=None) as batch_op:
        batch_op.drop_index(batch_op.f('ix_probe_runs_job_id'))
        batch_op.drop_index(batch_op.f('ix_probe_runs_cluster'))

    op.drop_table('probe_runs')
    with op.batch_alter_table('host_incidents', schema=None) as batch_op:
        batch_op.drop_index('ix_host_incidents_cluster_host')

    op.drop_table('host_incidents')
    op.drop_table('controller_locks')
    op.drop_table('controller_clusters')

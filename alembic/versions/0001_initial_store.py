"""Initial store: jobs, attempts, hosts, log blobs, job logs, compressed logs, diagnoses, labels,
proposed rules, controller actions, API tokens.

Revision ID: 0001
Revises: 
Create Date: 2026-11-29 10:21:31.977547
"""
from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

import app.db.base

revision: str = '0001'
down_revision: str | None = None
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table('api_tokens',
    sa.Column('id', sa.Integer(), nullable=False),
    sa.Column('name', sa.String(length=128), nullable=False),
    sa.Column('role', sa.String(length=16), nullable=False),
    sa.Column('token_hash', sa.String(length=64), nullable=False),
    sa.Column('revoked_at', app.db.base.UTCDateTime(timezone=True), nullable=True),
    sa.Column('created_at', app.db.base.UTCDateTime(timezone=True), server_default=sa.text('(CURRENT_TIMESTAMP)'), nullable=False),
    sa.PrimaryKeyConstraint('id', name=op.f('pk_api_tokens')),
    sa.UniqueConstraint('token_hash', name=op.f('uq_api_tokens_token_hash'))
    )
    op.create_table('jobs',
    sa.Column('id', sa.Integer(), nullable=False),
    sa.Column('cluster', sa.String(length=128), nullable=False),
    sa.Column('external_id', sa.String(length=256), nullable=False),
    sa.Column('scheduler', sa.String(length=64), nullable=True),
    sa.Column('user_name', sa.String(length=128), nullable=True),
    sa.Column('gpu_count', sa.Integer(), nullable=False),
    sa.Column('started_at', app.db.base.UTCDateTime(timezone=True), nullable=True),
    sa.Column('ended_at', app.db.base.UTCDateTime(timezone=True), nullable=True),
    sa.Column('state', sa.String(length=32), nullable=False),
    sa.Column('updated_at', app.db.base.UTCDateTime(timezone=True), nullable=False),
    sa.Column('error_type', sa.String(length=64), nullable=True),
    sa.Column('category', sa.String(length=32), nullable=True),
    sa.Column('diagnosis_id', sa.Integer(), nullable=True),
    sa.Column('created_at', app.db.base.UTCDateTime(timezone=True), server_default=sa.text('(CURRENT_TIMESTAMP)'), nullable=False),
    sa.PrimaryKeyConstraint('id', name=op.f('pk_jobs')),
    sa.UniqueConstraint('cluster', 'external_id', name=op.f('uq_jobs_cluster_external_id'))
    )
    with op.batch_alter_table('jobs', schema=None) as batch_op:
        batch_op.create_index(batch_op.f('ix_jobs_category'), ['category'], unique=False)
        batch_op.create_index(batch_op.f('ix_jobs_cluster'), ['cluster'], unique=False)
        batch_op.create_index(batch_op.f('ix_jobs_ended_at'), ['ended_at'], unique=False)
        batch_op.create_index(batch_op.f('ix_jobs_error_type'), ['error_type'], unique=False)
        batch_op.create_index(batch_op.f('ix_jobs_state'), ['state'], unique=False)

    op.create_table('log_blobs',
    sa.Column('sha256', sa.String(length=64), nullable=False),
    sa.Column('size', sa.BigInteger(), nullable=False),
    sa.Column('encoding', sa.String(length=16), nullable=False),
    sa.Column('created_at', app.db.base.UTCDateTime(timezone=True), server_default=sa.text('(CURRENT_TIMESTAMP)'), nullable=False),
    sa.PrimaryKeyConstraint('sha256', name=op.f('pk_log_blobs'))
    )
    op.create_table('attempts',
    sa.Column('id', sa.Integer(), nullable=False),
    sa.Column('job_id', sa.Integer(), nullable=False),
    sa.Column('number', sa.Integer(), nullable=False),
    sa.Column('started_at', app.db.base.UTCDateTime(timezone=True), nullable=True),
    sa.Column('ended_at', app.db.base.UTCDateTime(timezone=True), nullable=True),
    sa.Column('state', sa.String(length=32), nullable=True),
    sa.Column('created_at', app.db.base.UTCDateTime(timezone=True), server_default=sa.text('(CURRENT_TIMESTAMP)'), nullable=False),
    sa.ForeignKeyConstraint(['job_id'], ['jobs.id'], name=op.f('fk_attempts_job_id_jobs'), ondelete='CASCADE'),
    sa.PrimaryKeyConstraint('id', name=op.f('pk_attempts')),
    sa.UniqueConstraint('job_id', 'number', name=op.f('uq_attempts_job_id_number'))
    )
    with op.batch_alter_table('attempts', schema=None) as batch_op:
        batch_op.create_index(batch_op.f('ix_attempts_job_id'), ['job_id'], unique=False)

    op.create_table('job_hosts',
    sa.Column('job_id', sa.Integer(), nullable=False),
    sa.Column('host', sa.String(length=255), nullable=False),
    sa.ForeignKeyConstraint(['job_id'], ['jobs.id'], name=op.f('fk_job_hosts_job_id_jobs'), ondelete='CASCADE'),
    sa.PrimaryKeyConstraint('job_id', 'host', name=op.f('pk_job_hosts'))
    )
    with op.batch_alter_table('job_hosts', schema=None) as batch_op:
        batch_op.create_index(batch_op.f('ix_job_hosts_host'), ['host'], unique=False)

    op.create_table('job_logs',
    sa.Column('id', sa.Integer(), nullable=False),
    sa.Column('job_id', sa.Integer(), nullable=False),
    sa.Column('attempt_id', sa.Integer(), nullable=False),
    sa.Column('kind', sa.String(length=16), nullable=False),
    sa.Column('status', sa.String(length=16), nullable=False),
    sa.Column('size', sa.BigInteger(), nullable=False),
    sa.Column('encoding', sa.String(length=16), nullable=True),
    sa.Column('blob_sha256', sa.String(length=64), nullable=True),
    sa.Column('error', sa.Text(), nullable=True),
    sa.Column('warnings', sa.JSON(), nullable=False),
    sa.Column('updated_at', app.db.base.UTCDateTime(timezone=True), nullable=False),
    sa.Column('created_at', app.db.base.UTCDateTime(timezone=True), server_default=sa.text('(CURRENT_TIMESTAMP)'), nullable=False),
    sa.ForeignKeyConstraint(['attempt_id'], ['attempts.id'], name=op.f('fk_job_logs_attempt_id_attempts'), ondelete='CASCADE'),
    sa.ForeignKeyConstraint(['blob_sha256'], ['log_blobs.sha256'], name=op.f('fk_job_logs_blob_sha256_log_blobs')),
    sa.ForeignKeyConstraint(['job_id'], ['jobs.id'], name=op.f('fk_job_logs_job_id_jobs'), ondelete='CASCADE'),
    sa.PrimaryKeyConstraint('id', name=op.f('pk_job_logs'))
    )
    with op.batch_alter_table('job_logs', schema=None) as batch_op:
        batch_op.create_index(batch_op.f('ix_job_logs_attempt_id'), ['attempt_id'], unique=False)
        batch_op.create_index(batch_op.f('ix_job_logs_blob_sha256'), ['blob_sha256'], unique=False)
        batch_op.create_index(batch_op.f('ix_job_logs_job_id'), ['job_id'], unique=False)

    op.create_table('compressed_logs',
    sa.Column('id', sa.Integer(), nullable=False),
    sa.Column('job_log_id', sa.Integer(), nullable=False),
    sa.Column('log_bytes', sa.BigInteger(), nullable=False),
    sa.Column('rules_version', sa.String(length=64), nullable=False),
    sa.Column('text', sa.Text(), nullable=False),
    sa.Column('stats', sa.JSON(), nullable=False),
    sa.Column('created_at', app.db.base.UTCDateTime(timezone=True), server_default=sa.text('(CURRENT_TIMESTAMP)'), nullable=False),
    sa.ForeignKeyConstraint(['job_log_id'], ['job_logs.id'], name=op.f('fk_compressed_logs_job_log_id_job_logs'), ondelete='CASCADE'),
    sa.PrimaryKeyConstraint('id', name=op.f('pk_compressed_logs'))
    )
    with op.batch_alter_table('compressed_logs', schema=None) as batch_op:
        batch_op.create_index(batch_op.f('ix_compressed_logs_job_log_id'), ['job_log_id'], unique=False)

    op.create_table('diagnoses',
    sa.Column('id', sa.Integer(), nullable=False),
    sa.Column('job_id', sa.Integer(), nullable=False),
    sa.Column('attempt_id', sa.Integer(), nullable=False),
    sa.Column('job_log_id', sa.Integer(), nullable=False),
    sa.Column('log_bytes', sa.BigInteger(), nullable=False),
    sa.Column('status', sa.String(length=16), nullable=False),
    sa.Column('runs', sa.Integer(), nullable=False),
    sa.Column('result', sa.JSON(), nullable=True),
    sa.Column('error', sa.Text(), nullable=True),
    sa.Column('error_type', sa.String(length=64), nullable=True),
    sa.Column('category', sa.String(length=32), nullable=True),
    sa.Column('confidence', sa.Float(), nullable=True),
    sa.Column('decided_by', sa.String(length=16), nullable=True),
    sa.Column('rules_version', sa.String(length=64), nullable=True),
    sa.Column('prompt_version', sa.String(length=64), nullable=True),
    sa.Column('model_version', sa.String(length=128), nullable=True),
    sa.Column('compressed_log_id', sa.Integer(), nullable=True),
    sa.Column('started_at', app.db.base.UTCDateTime(timezone=True), nullable=True),
    sa.Column('finished_at', app.db.base.UTCDateTime(timezone=True), nullable=True),
    sa.Column('created_at', app.db.base.UTCDateTime(timezone=True), server_default=sa.text('(CURRENT_TIMESTAMP)'), nullable=False),
    sa.ForeignKeyConstraint(['attempt_id'], ['attempts.id'], name=op.f('fk_diagnoses_attempt_id_attempts'), ondelete='CASCADE'),
    sa.ForeignKeyConstraint(['compressed_log_id'], ['compressed_logs.id'], name=op.f('fk_diagnoses_compressed_log_id_compressed_logs')),
    sa.ForeignKeyConstraint(['job_id'], ['jobs.id'], name=op.f('fk_diagnoses_job_id_jobs'), ondelete='CASCADE'),
    sa.ForeignKeyConstraint(['job_log_id'], ['job_logs.id'], name=op.f('fk_diagnoses_job_log_id_job_logs'), ondelete='CASCADE'),
    sa.PrimaryKeyConstraint('id', name=op.f('pk_diagnoses'))
    )
    with op.batch_alter_table('diagnoses', schema=None) as batch_op:
        batch_op.create_index(batch_op.f('ix_diagnoses_error_type'), ['error_type'], unique=False)
        batch_op.create_index(batch_op.f('ix_diagnoses_job_id'), ['job_id'], unique=False)
        batch_op.create_index(batch_op.f('ix_diagnoses_job_log_id'), ['job_log_id'], unique=False)
        batch_op.create_index(batch_op.f('ix_diagnoses_status'), ['status'], unique=False)

    op.create_table('controller_actions',
    sa.Column('id', sa.Integer(), nullable=False),
    sa.Column('job_id', sa.Integer(), nullable=False),
    sa.Column('diagnosis_id', sa.Integer(), nullable=True),
    sa.Column('kind', sa.String(length=32), nullable=False),
    sa.Column('params', sa.JSON(), nullable=False),
    sa.Column('dry_run', sa.Boolean(), nullable=False),
    sa.Column('status', sa.String(length=16), nullable=False),
    sa.Column('actor', sa.String(length=128), nullable=False),
    sa.Column('result', sa.JSON(), nullable=False),
    sa.Column('created_at', app.db.base.UTCDateTime(timezone=True), server_default=sa.text('(CURRENT_TIMESTAMP)'), nullable=False),
    sa.ForeignKeyConstraint(['diagnosis_id'], ['diagnoses.id'], name=op.f('fk_controller_actions_diagnosis_id_diagnoses'), ondelete='SET NULL'),
    sa.ForeignKeyConstraint(['job_id'], ['jobs.id'], name=op.f('fk_controller_actions_job_id_jobs'), ondelete='CASCADE'),
    sa.PrimaryKeyConstraint('id', name=op.f('pk_controller_actions'))
    )
    with op.batch_alter_table('controller_actions', schema=None) as batch_op:
        batch_op.create_index(batch_op.f('ix_controller_actions_job_id'), ['job_id'], unique=False)

    op.create_table('labels',
    sa.Column('id', sa.Integer(), nullable=False),
    sa.Column('diagnosis_id', sa.Integer(), nullable=False),
    sa.Column('verdict', sa.String(length=16), nullable=False),
    sa.Column('error_type', sa.String(length=64), nullable=False),
    sa.Column('category', sa.String(length=32), nullable=False),
    sa.Column('note', sa.Text(), nullable=True),
    sa.Column('created_by', sa.String(length=128), nullable=False),
    sa.Column('created_at', app.db.base.UTCDateTime(timezone=True), server_default=sa.text('(CURRENT_TIMESTAMP)'), nullable=False),
    sa.ForeignKeyConstraint(['diagnosis_id'], ['diagnoses.id'], name=op.f('fk_labels_diagnosis_id_diagnoses'), ondelete='CASCADE'),
    sa.PrimaryKeyConstraint('id', name=op.f('pk_labels'))
    )
    with op.batch_alter_table('labels', schema=None) as batch_op:
        batch_op.create_index(batch_op.f('ix_labels_diagnosis_id'), ['diagnosis_id'], unique=False)

    op.create_table('proposed_rules',
    sa.Column('id', sa.Integer(), nullable=False),
    sa.Column('pattern', sa.Text(), nullable=False),
    sa.Column('error_type', sa.String(length=64), nullable=False),
    sa.Column('category', sa.String(length=32), nullable=False),
    sa.Column('evidence', sa.JSON(), nullable=False),
    sa.Column('hint', sa.Text(), nullable=True),
    sa.Column('source_diagnosis_id', sa.Integer(), nullable=True),
    sa.Column('status', sa.String(length=16), nullable=False),
    sa.Column('validation', sa.JSON(), nullable=False),
    sa.Column('proposed_by', sa.String(length=128), nullable=False),
    sa.Column('reviewed_by', sa.String(length=128), nullable=True),
    sa.Column('reviewed_at', app.db.base.UTCDateTime(timezone=True), nullable=True),
    sa.Column('review_note', sa.Text(), nullable=True),
    sa.Column('created_at', app.db.base.UTCDateTime(timezone=True), server_default=sa.text('(CURRENT_TIMESTAMP)'), nullable=False),
    sa.ForeignKeyConstraint(['source_diagnosis_id'], ['diagnoses.id'], name=op.f('fk_proposed_rules_source_diagnosis_id_diagnoses'), ondelete='SET NULL'),
    sa.PrimaryKeyConstraint('id', name=op.f('pk_proposed_rules'))
    )
    with op.batch_alter_table('proposed_rules', schema=None) as batch_op:
        batch_op.create_index(batch_op.f('ix_proposed_rules_status'), ['status'], unique=False)



def downgrade() -> None:
    with op.batch_alter_table('proposed_rules', schema=None) as batch_op:
        batch_op.drop_index(batch_op.f('ix_proposed_rules_status'))

    op.drop_table('proposed_rules')
    with op.batch_alter_table('labels', schema=None) as batch_op:
        batch_op.drop_index(batch_op.f('ix_labels_diagnosis_id'))

    op.drop_table('labels')
    with op.batch_alter_table('controller_actions', schema=None) as batch_op:
        batch_op.drop_index(batch_op.f('ix_controller_actions_job_id'))

    op.drop_table('controller_actions')
    with op.batch_alter_table('diagnoses', schema=None) as batch_op:
        batch_op.drop_index(batch_op.f('ix_diagnoses_status'))
        batch_op.drop_index(batch_op.f('ix_diagnoses_job_log_id'))
        batch_op.drop_index(batch_op.f('ix_diagnoses_job_id'))
        batch_op.drop_index(batch_op.f('ix_diagnoses_error_type'))

    op.drop_table('diagnoses')
    with op.batch_alter_table('compressed_logs', schema=None) as batch_op:
        batch_op.drop_index(batch_op.f('ix_compressed_logs_job_log_id'))

    op.drop_table('compressed_logs')
    with op.batch_alter_table('job_logs', schema=None) as batch_op:
        batch_op.drop_index(batch_op.f('ix_job_logs_job_id'))
        batch_op.drop_index(batch_op.f('ix_job_logs_blob_sha256'))
        batch_op.drop_index(batch_op.f('ix_job_logs_attempt_id'))

    op.drop_table('job_logs')
    with op.batch_alter_table('job_hosts', schema=None) as batch_op:
        batch_op.drop_index(batch_op.f('ix_job_hosts_host'))

    op.drop_table('job_hosts')
    with op.batch_alter_table('attempts', schema=None) as batch_op:
        batch_op.drop_index(batch_op.f('ix_attempts_job_id'))

    op.drop_table('attempts')
    op.drop_table('log_blobs')
    with op.batch_alter_table('jobs', schema=None) as batch_op:
        batch_op.drop_index(batch_op.f('ix_jobs_state'))
        batch_op.drop_index(batch_op.f('ix_jobs_error_type'))
        batch_op.drop_index(batch_op.f('ix_jobs_ended_at'))
        batch_op.drop_index(batch_op.f('ix_jobs_cluster'))
        batch_op.drop_index(batch_op.f('ix_jobs_category'))

    op.drop_table('jobs')
    op.drop_table('api_tokens')

"""LLM layer: labelled_cases (the retrieval CaseStore), proposed rules of any kind with the full
rule and its target family, and the LLM verdict and call accounting next to each diagnosis.

Revision ID: 0002
Revises: 0001
Create Date: 2026-11-29 10:49:59.659847
"""
from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

import app.db.base

revision: str = '0002'
down_revision: str | None = '0001'
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table('labelled_cases',
    sa.Column('id', sa.Integer(), nullable=False),
    sa.Column('case_id', sa.String(length=128), nullable=False),
    sa.Column('embedder', sa.String(length=64), nullable=False),
    sa.Column('dim', sa.Integer(), nullable=False),
    sa.Column('vector', sa.LargeBinary(), nullable=False),
    sa.Column('signature', sa.Text(), nullable=False),
    sa.Column('error_type', sa.String(length=64), nullable=False),
    sa.Column('category', sa.String(length=32), nullable=False),
    sa.Column('action', sa.String(length=32), nullable=False),
    sa.Column('human_confirmed', sa.Boolean(), nullable=False),
    sa.Column('evidence', sa.Text(), nullable=True),
    sa.Column('label_id', sa.Integer(), nullable=True),
    sa.Column('diagnosis_id', sa.Integer(), nullable=True),
    sa.Column('created_at', app.db.base.UTCDateTime(timezone=True), server_default=sa.text('(CURRENT_TIMESTAMP)'), nullable=False),
    sa.ForeignKeyConstraint(['diagnosis_id'], ['diagnoses.id'], name=op.f('fk_labelled_cases_diagnosis_id_diagnoses'), ondelete='SET NULL'),
    sa.ForeignKeyConstraint(['label_id'], ['labels.id'], name=op.f('fk_labelled_cases_label_id_labels'), ondelete='SET NULL'),
    sa.PrimaryKeyConstraint('id', name=op.f('pk_labelled_cases')),
    sa.UniqueConstraint('case_id', name=op.f('uq_labelled_cases_case_id'))
    )
    with op.batch_alter_table('labelled_cases', schema=None) as batch_op:
        batch_op.create_index(batch_op.f('ix_labelled_cases_embedder'), ['embedder'], unique=False)
        batch_op.create_index(batch_op.f('ix_labelled_cases_human_confirmed'), ['human_confirmed'], unique=False)

    with op.batch_alter_table('diagnoses', schema=None) as batch_op:
        batch_op.add_column(sa.Column('failure_signature', sa.Text(), nullable=True))
        batch_op.add_column(sa.Column('llm_verdict', sa.JSON(), nullable=True))
        batch_op.add_column(sa.Column('llm_calls', sa.Integer(), server_default='0', nullable=False))
        batch_op.add_column(sa.Column('tokens_in', sa.Integer(), server_default='0', nullable=False))
        batch_op.add_column(sa.Column('tokens_out', sa.Integer(), server_default='0', nullable=False))
        batch_op.add_column(sa.Column('llm_latency_s', sa.Float(), server_default='0', nullable=False))

    with op.batch_alter_table('proposed_rules', schema=None) as batch_op:
        batch_op.add_column(sa.Column('kind', sa.String(length=16), server_default='diagnosis', nullable=False))
        batch_op.add_column(sa.Column('family', sa.String(length=64), server_default='proposed', nullable=False))
        batch_op.add_column(sa.Column('rule', sa.JSON(), nullable=True))
        batch_op.alter_column('error_type',
               existing_type=sa.VARCHAR(length=64),
               nullable=True)
        batch_op.alter_column('category',
               existing_type=sa.VARCHAR(length=32),
               nullable=True)



def downgrade() -> None:
    # filter-rule proposals have no error type; they cannot exist in the 0001 schema
    op.execute("DELETE FROM proposed_rules WHERE error_type IS NULL OR category IS NULL")
    with op.batch_alter_table('proposed_rules', schema=None) as batch_op:
        batch_op.alter_column('category',
               existing_type=sa.VARCHAR(length=32),
               nullable=False)
        batch_op.alter_column('error_type',
               existing_type=sa.VARCHAR(length=64),
               nullable=False)
        batch_op.drop_column('rule')
        batch_op.drop_column('family')
        batch_op.drop_column('kind')

    with op.batch_alter_table('diagnoses', schema=None) as batch_op:
        batch_op.drop_column('llm_latency_s')
        batch_op.drop_column('tokens_out')
        batch_op.drop_column('tokens_in')
        batch_op.drop_column('llm_calls')
        batch_op.drop_column('llm_verdict')
        batch_op.drop_column('failure_signature')

    with op.batch_alter_table('labelled_cases', schema=None) as batch_op:
        batch_op.drop_index(batch_op.f('ix_labelled_cases_human_confirmed'))
        batch_op.drop_index(batch_op.f('ix_labelled_cases_embedder'))

    op.drop_table('labelled_cases')

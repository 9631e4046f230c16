"""Web UI: failure fingerprint and root-cause rule on each diagnosis (groups and rule hit counts
are queries), the sampled metric series with each compressed log (the job page chart), the
state engineers give a failure group, and browser sessions. Existing diagnoses get their
fingerprint and rule id from their stored result.

Revision ID: 0003_i14_web_ui
Revises: 0002
"""
from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

import app.db.base

revision: str = '0003_i14_web_ui'
down_revision: str | None = '0003_i11_relabel'
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def _backfill() -> None:
    from app.core.fingerprint import fingerprint
    from app.core.types import Diagnosis

    bind = op.get_bind()
    diagnoses = sa.table('diagnoses', sa.column('id', sa.Integer), sa.column('result', sa.JSON),
                         sa.column('fingerprint', sa.String), sa.column('rule_id', sa.String))
    rows = bind.execute(sa.select(diagnoses.c.id, diagnoses.c.result).where(diagnoses.c.result.is_not(None)))
    for row_id, result in rows.fetchall():
        try:
            diagnosis = Diagnosis.from_json_dict(result)
        except ValueError:
            continue  # a result of an older contract: left ungrouped rather than guessed
        bind.execute(diagnoses.update().where(diagnoses.c.id == row_id).values(
            fingerprint=fingerprint(diagnosis), rule_id=diagnosis.root_cause.rule_id))


def upgrade() -> None:
    op.create_table('failure_groups',
    sa.Column('fingerprint', sa.String(length=16), nullable=False),
    sa.Column('state', sa.String(length=16), nullable=False),
    sa.Column('note', sa.Text(), nullable=True),
    sa.Column('updated_by', sa.String(length=128), nullable=False),
    sa.Column('updated_at', app.db.base.UTCDateTime(timezone=True), nullable=False),
    sa.PrimaryKeyConstraint('fingerprint', name=op.f('pk_failure_groups'))
    )
    op.create_table('web_sessions',
    sa.Column('id', sa.Integer(), nullable=False),
    sa.Column('session_hash', sa.String(length=64), nullable=False),
    sa.Column('token_id', sa.Integer(), nullable=False),
    sa.Column('csrf_token', sa.String(length=64), nullable=False),
    sa.Column('expires_at', app.db.base.UTCDateTime(timezone=True), nullable=False),
    sa.Column('created_at', app.db.base.UTCDateTime(timezone=True), server_default=sa.text('(CURRENT_TIMESTAMP)'), nullable=False),
    sa.ForeignKeyConstraint(['token_id'], ['api_tokens.id'], name=op.f('fk_web_sessions_token_id_api_tokens'), ondelete='CASCADE'),
    sa.PrimaryKeyConstraint('id', name=op.f('pk_web_sessions')),
    sa.UniqueConstraint('session_hash', name=op.f('uq_web_sessions_session_hash'))
    )
    with op.batch_alter_table('web_sessions', schema=None) as batch_op:
        batch_op.create_index(batch_op.f('ix_web_sessions_token_id'), ['token_id'], unique=False)

    with op.batch_alter_table('diagnoses', schema=None) as batch_op:
        batch_op.add_column(sa.Column('fingerprint', sa.String(length=16), nullable=True))
        batch_op.add_column(sa.Column('rule_id', sa.String(length=128), nullable=True))
        batch_op.create_index(batch_op.f('ix_diagnoses_fingerprint'), ['fingerprint'], unique=False)
        batch_op.create_index(batch_op.f('ix_diagnoses_rule_id'), ['rule_id'], unique=False)

    with op.batch_alter_table('compressed_logs', schema=None) as batch_op:
        batch_op.add_column(sa.Column('metrics', sa.JSON(), nullable=True))

    _backfill()


def downgrade() -> None:
    with op.batch_alter_table('compressed_logs', schema=None) as batch_op:
        batch_op.drop_column('metrics')
    with op.batch_alter_table('diagnoses', schema=None) as batch_op:
        batch_op.drop_index(batch_op.f('ix_diagnoses_rule_id'))
        batch_op.drop_index(batch_op.f('ix_diagnoses_fingerprint'))
        batch_op.drop_column('rule_id')
        batch_op.drop_column('fingerprint')
    with op.batch_alter_table('web_sessions', schema=None) as batch_op:
        batch_op.drop_index(batch_op.f('ix_web_sessions_token_id'))
    op.drop_table('web_sessions')
    op.drop_table('failure_groups')

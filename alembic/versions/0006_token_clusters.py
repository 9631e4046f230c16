"""API tokens scoped to clusters: a scheduler token for one cluster reaches only its jobs.

Revision ID: 0006_token_clusters
Revises: 0005_host_repair
Create Date: 2026-12-03 08:45:00
"""
from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = '0006_token_clusters'
down_revision: str | None = '0005_host_repair'
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table('api_tokens') as batch:
        batch.add_column(sa.Column('clusters', sa.JSON(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table('api_tokens') as batch:
        batch.drop_column('clusters')

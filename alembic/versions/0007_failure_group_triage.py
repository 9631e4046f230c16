"""Failure groups as an error tracker keeps them: assignee, ticket link, merges, resolution time;
fingerprints recomputed with launcher/logger line prefixes ignored.

The data step recomputes `diagnoses.fingerprint` from each stored result (the fingerprint of
app.core.fingerprint as it is now: one failure behind `[rank3]:`, a timestamp + host or an NCCL
`host:pid:tid [dev]` prefix has one id) and moves each group decision to its new fingerprint;
where several old groups become one, the newest decision is kept. Controller records keep their
old fingerprints: a same-failure restart count starts again once after the upgrade.

Revision ID: 0007_failure_group_triage
Revises: 0006_token_clusters
Create Date: 2026-12-04 21:20:00
"""
from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

import app.db.base

revision: str = '0007_failure_group_triage'
down_revision: str | None = '0006_token_clusters'
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def _refingerprint() -> None:
    import json

    from app.core.fingerprint import fingerprint_of

    conn = op.get_bind()
    moved: dict[str, str] = {}
    rows = conn.execute(sa.text("SELECT id, fingerprint, result FROM diagnoses "
                                "WHERE fingerprint IS NOT NULL AND result IS NOT NULL"))
    updates = []
    for diag_id, old, result in rows:
        if isinstance(result, str):
            result = json.loads(result)
        rc = (result or {}).get("root_cause") or {}
        if not rc.get("error_type"):
            continue
        evidence = rc.get("evidence") or []
        new = fingerprint_of(rc["error_type"], rc.get("rule_id"), evidence[0].get("text", "") if evidence else "")
        if new != old:
            updates.append({"id": diag_id, "fp": new})
            moved.setdefault(old, new)
    for start in range(0, len(updates), 1000):
        conn.execute(sa.text("UPDATE diagnoses SET fingerprint = :fp WHERE id = :id"), updates[start:start + 1000])
    decisions = conn.execute(sa.text("SELECT fingerprint, updated_at FROM failure_groups ORDER BY updated_at DESC"))
    kept: set[str] = set()
    for old, _when in list(decisions):
        new = moved.get(old, old)
        if new in kept:  # an older decision about a group that is now part of another one
            conn.execute(sa.text("DELETE FROM failure_groups WHERE fingerprint = :old"), {"old": old})
            continue
        kept.add(new)
        if new != old:
            conn.execute(sa.text("DELETE FROM failure_groups WHERE fingerprint = :new"), {"new": new})
            conn.execute(sa.text("UPDATE failure_groups SET fingerprint = :new WHERE fingerprint = :old"),
                         {"new": new, "old": old})


def upgrade() -> None:
    with op.batch_alter_table('failure_groups') as batch:
        batch.add_column(sa.Column('assignee', sa.String(length=128), nullable=True))
        batch.add_column(sa.Column('ticket', sa.String(length=2000), nullable=True))
        batch.add_column(sa.Column('merged_into', sa.String(length=16), nullable=True))
        batch.add_column(sa.Column('resolved_at', app.db.base.UTCDateTime(timezone=True), nullable=True))
    op.execute("UPDATE failure_groups SET resolved_at = updated_at WHERE state = 'resolved'")
    _refingerprint()


def downgrade() -> None:
    with op.batch_alter_table('failure_groups') as batch:
        batch.drop_column('resolved_at')
        batch.drop_column('merged_into')
        batch.drop_column('ticket')
        batch.drop_column('assignee')

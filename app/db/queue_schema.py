"""The procrastinate schema on PostgreSQL, applied once by whichever process starts first."""

from __future__ import annotations

from sqlalchemy import text

from app.db.engine import Database

SCHEMA_LOCK = 0x6C6F6764  # one advisory lock for every queue (diagnoses, re-labeling): applied once


def ensure_procrastinate_schema(db: Database) -> None:
    from procrastinate.schema import SchemaManager

    with db.engine.begin() as conn:
        conn.execute(text("SELECT pg_advisory_xact_lock(:k)"), {"k": SCHEMA_LOCK})
        if conn.execute(text("SELECT to_regclass('procrastinate_jobs')")).scalar() is None:
            # simple-query protocol (no parameters) allows the multi-statement schema
            conn.connection.driver_connection.execute(SchemaManager.get_schema())

from __future__ import annotations

import pytest
from alembic.autogenerate import compare_metadata
from alembic.runtime.migration import MigrationContext
from sqlalchemy import inspect

from app.db.engine import Database
from app.db.migrate import (
    current_revision,
    head_revision,
    include_object,
    upgrade_to_head,
)
from app.db.models import Base
from app.settings import Settings


def test_every_setting_is_documented():
    undocumented = [name for name, field in Settings.model_fields.items()
                    if not (field.description and len(field.description) > 10)]
    assert undocumented == []


def test_settings_from_env(monkeypatch, tmp_path):
    monkeypatch.setenv("LOGDX_DATA_DIR", str(tmp_path))
    monkeypatch.setenv("LOGDX_LLM_API_KEY", "sk-secret")
    monkeypatch.setenv("LOGDX_SYNC_DIAGNOSE_MAX_BYTES", "10")
    s = Settings()
    assert s.data_dir == tmp_path
    assert s.effective_database_url == f"sqlite:///{tmp_path / 'logdx.db'}"
    assert s.sync_diagnose_max_bytes == 10
    assert "sk-secret" not in repr(s)
    assert s.llm_api_key.get_secret_value() == "sk-secret"


def _db(tmp_path, database_url) -> Database:
    return Database(database_url or f"sqlite:///{tmp_path / 'm.db'}")


def test_migrate_empty_db_to_head_without_drift(tmp_path, database_url):
    db = _db(tmp_path, database_url)
    upgrade_to_head(db.engine)
    assert current_revision(db.engine) == head_revision()
    assert {"jobs", "diagnoses", "labels", "log_blobs", "api_tokens"} <= set(inspect(db.engine).get_table_names())
    with db.engine.connect() as conn:
        ctx = MigrationContext.configure(conn, opts={"compare_type": True, "include_object": include_object})
        diff = compare_metadata(ctx, Base.metadata)
    assert diff == [], f"models drifted from the migrations: {diff}"
    upgrade_to_head(db.engine)  # idempotent
    db.dispose()


def test_sqlite_runs_in_wal_mode(tmp_path):
    db = _db(tmp_path, None)
    with db.engine.connect() as conn:
        assert conn.exec_driver_sql("PRAGMA journal_mode").scalar() == "wal"
    db.dispose()


@pytest.mark.parametrize("bad", [{"max_upload_bytes": 0}, {"diagnosis_executor": "fork"}])
def test_bad_settings_are_refused(bad, tmp_path):
    with pytest.raises(ValueError):
        Settings(data_dir=tmp_path, **bad)


def test_service_doc_lists_every_setting():
    from tests.service.conftest import REPO

    doc = (REPO / "docs" / "SERVICE.md").read_text()
    missing = [f"LOGDX_{name.upper()}" for name in Settings.model_fields if f"LOGDX_{name.upper()}" not in doc]
    assert missing == []

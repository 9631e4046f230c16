"""Programmatic Alembic: upgrade to head at start-up, report the current revision."""

from __future__ import annotations

from functools import lru_cache

from alembic import command
from alembic.config import Config
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory
from sqlalchemy import Engine, text
from sqlalchemy.exc import DBAPIError

from app import resources



def include_object(obj, name, type_, reflected, compare_to) -> bool:  # noqa: ANN001
    """Only our tables take part in autogenerate (procrastinate owns its own schema)."""
    if type_ == "table" and reflected and compare_to is None:
        return False
    return True


def alembic_config(url: str) -> Config:
    """The migrations shipped with logdx (app/resources.py), configured in code: an installed
    wheel has no alembic.ini (the checkout's one is for running `alembic` by hand)."""
    cfg = Config()
    cfg.set_main_option("script_location", str(resources.data_dir("alembic")))
    cfg.set_main_option("path_separator", "os")
    cfg.set_main_option("sqlalchemy.url", url.replace("%", "%%"))
    cfg.attributes["configure_logging"] = False
    return cfg


_MIGRATION_LOCK = 0x6C6F6778  # pg advisory lock: replicas starting together migrate one at a time


def check_database(engine: Engine) -> None:
    """Refuse to start on a SQLite file with damaged pages (`PRAGMA quick_check`: reads every
    page, about a second per GB): serving from it would answer 500s, or worse, rows that are
    wrong. PostgreSQL checks its own pages."""
    if engine.dialect.name != "sqlite":
        return
    problems: list[str] = []
    try:
        with engine.connect() as conn:
            problems = [row[0] for row in conn.execute(text("PRAGMA quick_check(20)"))]
    except DBAPIError as exc:
        problems = [str(exc.orig)]
    if problems != ["ok"]:
        raise RuntimeError(f"the SQLite database {engine.url.database} is corrupt: {'; '.join(problems[:5])}. "
                           "Restore it from a backup (or `sqlite3 FILE .recover`) before starting the server")


def upgrade_to_head(engine: Engine) -> None:
    cfg = alembic_config(engine.url.render_as_string(hide_password=False))
    with engine.begin() as conn:
        if conn.dialect.name == "postgresql":
            conn.execute(text("SELECT pg_advisory_xact_lock(:k)"), {"k": _MIGRATION_LOCK})
        cfg.attributes["connection"] = conn
        command.upgrade(cfg, "head")


@lru_cache(maxsize=1)
def head_revision() -> str | None:
    return ScriptDirectory.from_config(alembic_config("sqlite://")).get_current_head()


def current_revision(engine: Engine) -> str | None:
    with engine.connect() as conn:
        return MigrationContext.configure(conn).get_current_revision()

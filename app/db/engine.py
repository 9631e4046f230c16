"""Engine and session factory. SQLite gets WAL, a busy timeout and foreign keys so that the
API threads, the worker and the CLI can share one file safely."""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import TypeVar

from sqlalchemy import Engine, create_engine, event, make_url
from sqlalchemy.orm import Session, sessionmaker

T = TypeVar("T")


def _private_sqlite_file(url: str) -> None:
    """The database holds raw log excerpts: owner-only. SQLite gives its -wal and -shm files the
    mode of the database file, so creating that one 0600 covers all three."""
    path = make_url(url).database
    if not path or path == ":memory:" or path.startswith("file:"):
        return
    fd = os.open(path, os.O_CREAT | os.O_WRONLY, 0o600)
    try:
        if os.fstat(fd).st_uid == os.getuid():
            os.fchmod(fd, 0o600)
    finally:
        os.close(fd)


def make_engine(url: str) -> Engine:
    if url.startswith("sqlite"):
        _private_sqlite_file(url)
        engine = create_engine(url, connect_args={"check_same_thread": False, "timeout": 30})

        @event.listens_for(engine, "connect")
        def _sqlite_pragmas(dbapi_conn, _record):  # noqa: ANN001
            cur = dbapi_conn.cursor()
            cur.execute("PRAGMA journal_mode=WAL")
            cur.execute("PRAGMA synchronous=NORMAL")
            cur.execute("PRAGMA foreign_keys=ON")
            cur.execute("PRAGMA busy_timeout=30000")
            cur.close()
            # take over transaction control from pysqlite (see _sqlite_begin)
            dbapi_conn.isolation_level = None

        @event.listens_for(engine, "begin")
        def _sqlite_begin(conn):  # noqa: ANN001
            # BEGIN IMMEDIATE takes the write lock up front: a read-then-write transaction can
            # then wait (busy_timeout) instead of failing with SQLITE_BUSY when another writer
            # committed after its read. Transactions here are short, so serialising is cheap.
            conn.exec_driver_sql("BEGIN IMMEDIATE")

        return engine
    return create_engine(url, pool_pre_ping=True, pool_size=10, max_overflow=20)


class Database:
    """Owns the engine and hands out sessions; the caller of `transaction` owns the commit."""

    def __init__(self, url: str) -> None:
        self.url = url
        self.engine = make_engine(url)
        self.sessions = sessionmaker(self.engine, expire_on_commit=False)

    @contextmanager
    def transaction(self) -> Iterator[Session]:
        with self.sessions() as session, session.begin():
            yield session

    def run(self, fn: Callable[..., T], /, **kwargs) -> T:
        """Run `fn(session=..., **kwargs)` in one transaction (for use from worker threads)."""
        with self.transaction() as session:
            return fn(session=session, **kwargs)

    def dispose(self) -> None:
        self.engine.dispose()


def insert_returning_ignore(session: Session, model: type, **values):  # noqa: ANN201
    """`INSERT ... ON CONFLICT DO NOTHING RETURNING id`: a row comes back only if this call
    inserted it. Concurrent requests creating the same row (same blob, same job) both succeed."""
    return _insert(session, model, values).on_conflict_do_nothing().returning(model.__table__.c[_pk(model)])


def insert_ignore(session: Session, model: type, **values) -> None:
    session.execute(_insert(session, model, values).on_conflict_do_nothing())


def _pk(model: type) -> str:
    return model.__table__.primary_key.columns.values()[0].name


def _insert(session: Session, model: type, values: dict):  # noqa: ANN202
    dialect = session.get_bind().dialect.name
    if dialect == "postgresql":
        from sqlalchemy.dialects.postgresql import insert
    elif dialect == "sqlite":
        from sqlalchemy.dialects.sqlite import insert
    else:  # pragma: no cover - only the two supported databases
        raise NotImplementedError(f"unsupported database dialect {dialect}")
    return insert(model).values(**values)

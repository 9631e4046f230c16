"""A re-labeling run and its items. The items are the run's checkpoint: one row per log, written
when the run is created, and each one finished (done or failed) in the transaction that stores
its result. An interrupted run resumes with the items that are not finished."""

from __future__ import annotations

from datetime import datetime
from enum import StrEnum

from sqlalchemy import JSON, BigInteger, Boolean, Float, ForeignKey, Index, Integer, String, Text
from sqlalchemy.orm import Mapped, mapped_column

from app.db.base import Base, CreatedAtMixin, UTCDateTime


class RunSource(StrEnum):
    STORED = "stored"    # jobs already in the store
    ARCHIVE = "archive"  # a directory or glob of log files to import


class RunStatus(StrEnum):
    RUNNING = "running"  # items left to do (also while nobody works on it: resume)
    DONE = "done"        # every item finished (done or failed)


class ItemStatus(StrEnum):
    PENDING = "pending"
    RUNNING = "running"  # claimed; a worker that died leaves it so, and it is claimed again
    DONE = "done"
    FAILED = "failed"    # unreadable or corrupt: recorded and skipped


ITEM_OPEN = (ItemStatus.PENDING.value, ItemStatus.RUNNING.value)


class RelabelRun(CreatedAtMixin, Base):
    __tablename__ = "relabel_runs"

    id: Mapped[int] = mapped_column(primary_key=True)
    source: Mapped[str] = mapped_column(String(16))
    status: Mapped[str] = mapped_column(String(16), index=True)
    dry_run: Mapped[bool] = mapped_column(Boolean, default=False)
    # what was selected: job filters (stored) or the archive path/glob and cluster (archive)
    selection: Mapped[dict] = mapped_column(JSON)
    rules_dir: Mapped[str | None] = mapped_column(Text)  # rules to diagnose with; null: the service's
    rules_version: Mapped[str | None] = mapped_column(String(64))  # version of those rules at creation
    batch_size: Mapped[int] = mapped_column(Integer)
    total_items: Mapped[int] = mapped_column(Integer, default=0)
    total_bytes: Mapped[int] = mapped_column(BigInteger, default=0)
    created_by: Mapped[str] = mapped_column(String(128))
    finished_at: Mapped[datetime | None] = mapped_column(UTCDateTime())


class RelabelItem(Base):
    """One log of a run, with what it was diagnosed as before and after."""

    __tablename__ = "relabel_items"
    __table_args__ = (Index("ix_relabel_items_run_id_status", "run_id", "status"),)

    id: Mapped[int] = mapped_column(primary_key=True)
    run_id: Mapped[int] = mapped_column(ForeignKey("relabel_runs.id", ondelete="CASCADE"))
    status: Mapped[str] = mapped_column(String(16))
    job_id: Mapped[int | None] = mapped_column(ForeignKey("jobs.id", ondelete="SET NULL"))
    job_log_id: Mapped[int | None] = mapped_column(ForeignKey("job_logs.id", ondelete="SET NULL"))
    path: Mapped[str | None] = mapped_column(Text)  # archive file (archive runs)
    external_id: Mapped[str | None] = mapped_column(String(256))  # the imported job's id: path in the archive
    size: Mapped[int] = mapped_column(BigInteger, default=0)
    old_diagnosis_id: Mapped[int | None] = mapped_column(Integer)
    old_error_type: Mapped[str | None] = mapped_column(String(64))
    old_rule_id: Mapped[str | None] = mapped_column(String(128))
    old_rules_version: Mapped[str | None] = mapped_column(String(64))
    human_error_type: Mapped[str | None] = mapped_column(String(64))  # newest human label of the job
    new_diagnosis_id: Mapped[int | None] = mapped_column(Integer)  # null in dry runs
    new_error_type: Mapped[str | None] = mapped_column(String(64))
    new_category: Mapped[str | None] = mapped_column(String(32))
    new_rule_id: Mapped[str | None] = mapped_column(String(128))
    new_confidence: Mapped[float | None] = mapped_column(Float)
    new_versions: Mapped[dict | None] = mapped_column(JSON)
    error: Mapped[str | None] = mapped_column(Text)
    runs: Mapped[int] = mapped_column(Integer, default=0)  # claims (a resumed item counts twice)
    worker: Mapped[str | None] = mapped_column(String(128))  # host:pid of the last claim
    finished_at: Mapped[datetime | None] = mapped_column(UTCDateTime())

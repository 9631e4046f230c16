"""Restart-controller state: recovery history per job, host incidents, probe runs, per-cluster
switches and the one-action-per-job lock. The audit log itself is `controller_actions`."""
from __future__ import annotations

from datetime import datetime

from sqlalchemy import JSON, Boolean, Float, ForeignKey, Index, Integer, String, Text
from sqlalchemy.orm import Mapped, mapped_column

from app.db.base import Base, CreatedAtMixin, UTCDateTime, utcnow


class RecoveryRun(CreatedAtMixin, Base):
    """One controller decision for one failure of a job: its fingerprint, the plan and how it
    ended. The history the retry budget counts; the idempotency key makes a retried webhook
    return the first run instead of acting twice."""

    __tablename__ = "recovery_runs"

    id: Mapped[int] = mapped_column(primary_key=True)
    job_id: Mapped[int] = mapped_column(ForeignKey("jobs.id", ondelete="CASCADE"), index=True)
    diagnosis_id: Mapped[int | None] = mapped_column(ForeignKey("diagnoses.id", ondelete="SET NULL"))
    idempotency_key: Mapped[str] = mapped_column(String(200), unique=True)
    fingerprint: Mapped[str] = mapped_column(String(32), index=True)
    error_type: Mapped[str] = mapped_column(String(64))
    action: Mapped[str] = mapped_column(String(32))
    policy_id: Mapped[str] = mapped_column(String(64))
    last_step: Mapped[int | None] = mapped_column(Integer)
    retry_number: Mapped[int] = mapped_column(Integer, default=0)
    dry_run: Mapped[bool] = mapped_column(Boolean, default=True)
    status: Mapped[str] = mapped_column(String(16))  # running | done | failed | stopped
    reason: Mapped[str] = mapped_column(Text, default="")
    plan: Mapped[dict] = mapped_column(JSON, default=dict)
    outcome: Mapped[dict] = mapped_column(JSON, default=dict)


class HostIncident(CreatedAtMixin, Base):
    """A host named by a real infrastructure failure (any job): repeat offenders are drained.
    Resuming the node after a repair resolves its incidents (kept, no longer counted)."""

    __tablename__ = "host_incidents"
    __table_args__ = (Index("ix_host_incidents_cluster_host", "cluster", "host"),)

    id: Mapped[int] = mapped_column(primary_key=True)
    cluster: Mapped[str] = mapped_column(String(128))
    host: Mapped[str] = mapped_column(String(255))
    job_id: Mapped[int | None] = mapped_column(ForeignKey("jobs.id", ondelete="SET NULL"))
    fingerprint: Mapped[str] = mapped_column(String(32))
    error_type: Mapped[str] = mapped_column(String(64))
    resolved_at: Mapped[datetime | None] = mapped_column(UTCDateTime())
    resolved_by: Mapped[str | None] = mapped_column(String(128))


class ProbeRun(CreatedAtMixin, Base):
    __tablename__ = "probe_runs"

    id: Mapped[int] = mapped_column(primary_key=True)
    cluster: Mapped[str] = mapped_column(String(128), index=True)
    job_id: Mapped[int | None] = mapped_column(ForeignKey("jobs.id", ondelete="SET NULL"), index=True)
    hosts: Mapped[list] = mapped_column(JSON, default=list)
    verdict: Mapped[str] = mapped_column(String(32))  # ok | faulty | inconclusive
    faulty: Mapped[list] = mapped_column(JSON, default=list)
    slow: Mapped[list] = mapped_column(JSON, default=list)
    duration_s: Mapped[float] = mapped_column(Float, default=0.0)
    result: Mapped[dict] = mapped_column(JSON, default=dict)


class ClusterControl(Base):
    """Per-cluster switch: the controller acts only where an admin enabled it (dry-run otherwise)."""

    __tablename__ = "controller_clusters"

    cluster: Mapped[str] = mapped_column(String(128), primary_key=True)
    actions_enabled: Mapped[bool] = mapped_column(Boolean, default=False)
    node_count: Mapped[int | None] = mapped_column(Integer)
    updated_by: Mapped[str] = mapped_column(String(128))
    updated_at: Mapped[datetime] = mapped_column(UTCDateTime(), default=utcnow, onupdate=utcnow)


class JobLock(Base):
    """One controller action per job at a time: a row per held lock, taken by INSERT (the primary
    key refuses a second holder on SQLite and PostgreSQL alike), stolen only once expired."""

    __tablename__ = "controller_locks"

    job_id: Mapped[int] = mapped_column(ForeignKey("jobs.id", ondelete="CASCADE"), primary_key=True)
    holder: Mapped[str] = mapped_column(String(200))
    expires_at: Mapped[datetime] = mapped_column(UTCDateTime())

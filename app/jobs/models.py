from __future__ import annotations

from datetime import datetime
from enum import StrEnum

from sqlalchemy import ForeignKey, Integer, String, UniqueConstraint
from sqlalchemy.orm import Mapped, mapped_column, relationship

from app.db.base import Base, CreatedAtMixin, UTCDateTime, utcnow


class JobState(StrEnum):
    PENDING = "pending"
    RUNNING = "running"
    COMPLETED = "completed"
    FAILED = "failed"
    CANCELLED = "cancelled"
    TIMEOUT = "timeout"
    NODE_FAIL = "node_fail"
    OUT_OF_MEMORY = "out_of_memory"
    UNKNOWN = "unknown"


class Job(CreatedAtMixin, Base):
    __tablename__ = "jobs"
    __table_args__ = (UniqueConstraint("cluster", "external_id"),)

    id: Mapped[int] = mapped_column(primary_key=True)
    cluster: Mapped[str] = mapped_column(String(128), index=True)
    external_id: Mapped[str] = mapped_column(String(256))
    scheduler: Mapped[str | None] = mapped_column(String(64))
    user: Mapped[str | None] = mapped_column("user_name", String(128))
    gpu_count: Mapped[int] = mapped_column(Integer, default=0)
    started_at: Mapped[datetime | None] = mapped_column(UTCDateTime())
    ended_at: Mapped[datetime | None] = mapped_column(UTCDateTime(), index=True)
    state: Mapped[str] = mapped_column(String(32), default=JobState.UNKNOWN.value, index=True)
    updated_at: Mapped[datetime] = mapped_column(UTCDateTime(), default=utcnow, onupdate=utcnow)
    # Effective root cause: the newest finished diagnosis, overridden by a correcting label.
    # Denormalised so that job filters and statistics stay single-table queries.
    error_type: Mapped[str | None] = mapped_column(String(64), index=True)
    category: Mapped[str | None] = mapped_column(String(32), index=True)
    diagnosis_id: Mapped[int | None] = mapped_column(Integer)

    hosts: Mapped[list[JobHost]] = relationship(
        back_populates="job", cascade="all, delete-orphan", lazy="selectin", order_by="JobHost.host"
    )
    attempts: Mapped[list[Attempt]] = relationship(
        back_populates="job", cascade="all, delete-orphan", lazy="selectin", order_by="Attempt.number"
    )

    @property
    def host_names(self) -> list[str]:
        return [h.host for h in self.hosts]


class JobHost(Base):
    __tablename__ = "job_hosts"

    job_id: Mapped[int] = mapped_column(ForeignKey("jobs.id", ondelete="CASCADE"), primary_key=True)
    host: Mapped[str] = mapped_column(String(255), primary_key=True, index=True)
    job: Mapped[Job] = relationship(back_populates="hosts")


class Attempt(CreatedAtMixin, Base):
    """One run of a job (the scheduler may requeue it); logs and diagnoses hang off attempts."""

    __tablename__ = "attempts"
    __table_args__ = (UniqueConstraint("job_id", "number"),)

    id: Mapped[int] = mapped_column(primary_key=True)
    job_id: Mapped[int] = mapped_column(ForeignKey("jobs.id", ondelete="CASCADE"), index=True)
    number: Mapped[int] = mapped_column(Integer)
    started_at: Mapped[datetime | None] = mapped_column(UTCDateTime())
    ended_at: Mapped[datetime | None] = mapped_column(UTCDateTime())
    state: Mapped[str | None] = mapped_column(String(32))
    # the scheduler's "exit:signal" of the attempt (Slurm's ExitCode), when it reported one
    exit_code: Mapped[str | None] = mapped_column(String(16))
    job: Mapped[Job] = relationship(back_populates="attempts")

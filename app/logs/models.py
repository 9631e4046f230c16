from __future__ import annotations

from datetime import datetime
from enum import StrEnum

from sqlalchemy import JSON, BigInteger, ForeignKey, String, Text
from sqlalchemy.orm import Mapped, mapped_column

from app.db.base import Base, CreatedAtMixin, UTCDateTime, utcnow


class Encoding(StrEnum):
    PLAIN = "plain"
    GZIP = "gzip"
    ZSTD = "zstd"


class LogKind(StrEnum):
    UPLOAD = "upload"    # whole log in one PUT
    CHUNKED = "chunked"  # appended while the job runs


class LogStatus(StrEnum):
    RECEIVING = "receiving"  # chunked log still open
    COMPLETE = "complete"
    CORRUPT = "corrupt"      # kept as received, but the archive does not decode


class LogBlob(CreatedAtMixin, Base):
    """Raw bytes live in DATA_DIR/blobs/<sha[:2]>/<sha>; the row only describes them."""

    __tablename__ = "log_blobs"

    sha256: Mapped[str] = mapped_column(String(64), primary_key=True)
    size: Mapped[int] = mapped_column(BigInteger)
    encoding: Mapped[str] = mapped_column(String(16))


class JobLog(CreatedAtMixin, Base):
    __tablename__ = "job_logs"

    id: Mapped[int] = mapped_column(primary_key=True)
    job_id: Mapped[int] = mapped_column(ForeignKey("jobs.id", ondelete="CASCADE"), index=True)
    attempt_id: Mapped[int] = mapped_column(ForeignKey("attempts.id", ondelete="CASCADE"), index=True)
    kind: Mapped[str] = mapped_column(String(16))
    status: Mapped[str] = mapped_column(String(16))
    size: Mapped[int] = mapped_column(BigInteger, default=0)
    encoding: Mapped[str | None] = mapped_column(String(16))
    blob_sha256: Mapped[str | None] = mapped_column(ForeignKey("log_blobs.sha256"), index=True)
    error: Mapped[str | None] = mapped_column(Text)
    warnings: Mapped[list] = mapped_column(JSON, default=list)
    updated_at: Mapped[datetime] = mapped_column(UTCDateTime(), default=utcnow, onupdate=utcnow)


class CompressedLog(CreatedAtMixin, Base):
    """Compact text produced by the pipeline for a log prefix under one rules version."""

    __tablename__ = "compressed_logs"

    id: Mapped[int] = mapped_column(primary_key=True)
    job_log_id: Mapped[int] = mapped_column(ForeignKey("job_logs.id", ondelete="CASCADE"), index=True)
    log_bytes: Mapped[int] = mapped_column(BigInteger)
    rules_version: Mapped[str] = mapped_column(String(64))
    text: Mapped[str] = mapped_column(Text)
    stats: Mapped[dict] = mapped_column(JSON)
    # sampled metric series [{line, step, values: {loss, grad_norm, ...}, nan}] for the job page chart
    metrics: Mapped[list | None] = mapped_column(JSON)

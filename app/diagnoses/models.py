from __future__ import annotations

from datetime import datetime
from enum import StrEnum

from sqlalchemy import JSON, BigInteger, Float, ForeignKey, Integer, String, Text
from sqlalchemy.orm import Mapped, mapped_column

from app.db.base import Base, CreatedAtMixin, UTCDateTime


class DiagnosisStatus(StrEnum):
    PENDING = "pending"
    RUNNING = "running"
    DONE = "done"
    FAILED = "failed"


class DiagnosisRow(CreatedAtMixin, Base):
    """A diagnosis request and, once done, its result. A new request makes a new row; a row's
    result is written once (status pending/running -> done/failed) and never replaced."""

    __tablename__ = "diagnoses"

    id: Mapped[int] = mapped_column(primary_key=True)
    job_id: Mapped[int] = mapped_column(ForeignKey("jobs.id", ondelete="CASCADE"), index=True)
    attempt_id: Mapped[int] = mapped_column(ForeignKey("attempts.id", ondelete="CASCADE"))
    job_log_id: Mapped[int] = mapped_column(ForeignKey("job_logs.id", ondelete="CASCADE"), index=True)
    log_bytes: Mapped[int] = mapped_column(BigInteger)  # prefix of the (append-only) log diagnosed
    status: Mapped[str] = mapped_column(String(16), index=True)
    runs: Mapped[int] = mapped_column(Integer, default=0)  # executions started (re-queues count)
    result: Mapped[dict | None] = mapped_column(JSON)
    error: Mapped[str | None] = mapped_column(Text)
    error_type: Mapped[str | None] = mapped_column(String(64), index=True)
    category: Mapped[str | None] = mapped_column(String(32))
    confidence: Mapped[float | None] = mapped_column(Float)
    decided_by: Mapped[str | None] = mapped_column(String(16))
    rules_version: Mapped[str | None] = mapped_column(String(64))
    prompt_version: Mapped[str | None] = mapped_column(String(64))
    model_version: Mapped[str | None] = mapped_column(String(128))
    compressed_log_id: Mapped[int | None] = mapped_column(ForeignKey("compressed_logs.id"))
    # the normalised failure signature (app.llm.retrieval.failure_signature): what a label embeds
    failure_signature: Mapped[str | None] = mapped_column(Text)
    # app.core.fingerprint of the result: failure groups are a GROUP BY on it
    fingerprint: Mapped[str | None] = mapped_column(String(16), index=True)
    rule_id: Mapped[str | None] = mapped_column(String(128), index=True)  # root cause's rule (hit counts)
    # what the LLM agent answered (accepted or not); null when it was not consulted
    llm_verdict: Mapped[dict | None] = mapped_column(JSON)
    llm_calls: Mapped[int] = mapped_column(Integer, default=0, server_default="0")
    tokens_in: Mapped[int] = mapped_column(Integer, default=0, server_default="0")
    tokens_out: Mapped[int] = mapped_column(Integer, default=0, server_default="0")
    llm_latency_s: Mapped[float] = mapped_column(Float, default=0.0, server_default="0")
    started_at: Mapped[datetime | None] = mapped_column(UTCDateTime())
    finished_at: Mapped[datetime | None] = mapped_column(UTCDateTime())

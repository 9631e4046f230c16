from __future__ import annotations

from datetime import datetime
from enum import StrEnum

from sqlalchemy import JSON, ForeignKey, String, Text
from sqlalchemy.orm import Mapped, mapped_column

from app.db.base import Base, CreatedAtMixin, UTCDateTime


class ProposalStatus(StrEnum):
    PROPOSED = "proposed"
    APPROVED = "approved"
    REJECTED = "rejected"


class ProposedRule(CreatedAtMixin, Base):
    __tablename__ = "proposed_rules"

    id: Mapped[int] = mapped_column(primary_key=True)
    pattern: Mapped[str] = mapped_column(Text)
    error_type: Mapped[str] = mapped_column(String(64))
    category: Mapped[str] = mapped_column(String(32))
    evidence: Mapped[list] = mapped_column(JSON, default=list)
    hint: Mapped[str | None] = mapped_column(Text)
    source_diagnosis_id: Mapped[int | None] = mapped_column(ForeignKey("diagnoses.id", ondelete="SET NULL"))
    status: Mapped[str] = mapped_column(String(16), index=True)
    validation: Mapped[dict] = mapped_column(JSON, default=dict)
    proposed_by: Mapped[str] = mapped_column(String(128))
    reviewed_by: Mapped[str | None] = mapped_column(String(128))
    reviewed_at: Mapped[datetime | None] = mapped_column(UTCDateTime())
    review_note: Mapped[str | None] = mapped_column(Text)

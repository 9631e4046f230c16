from __future__ import annotations

from datetime import datetime
from enum import StrEnum

from sqlalchemy import JSON, ForeignKey, String, Text
from sqlalchemy.orm import Mapped, mapped_column

from app.db.base import Base, CreatedAtMixin, UTCDateTime


class RuleKind(StrEnum):
    DIAGNOSIS = "diagnosis"
    FILTER = "filter"


class ProposalStatus(StrEnum):
    PROPOSED = "proposed"
    APPROVED = "approved"
    REJECTED = "rejected"


class ProposedRule(CreatedAtMixin, Base):
    __tablename__ = "proposed_rules"

    id: Mapped[int] = mapped_column(primary_key=True)
    kind: Mapped[str] = mapped_column(String(16), default="diagnosis", server_default="diagnosis")
    family: Mapped[str] = mapped_column(String(64), default="proposed", server_default="proposed")
    # the full rule as it is appended to rules/<family>.yaml on approval
    rule: Mapped[dict | None] = mapped_column(JSON)
    pattern: Mapped[str] = mapped_column(Text)
    error_type: Mapped[str | None] = mapped_column(String(64))  # null for filter rules
    category: Mapped[str | None] = mapped_column(String(32))
    evidence: Mapped[list] = mapped_column(JSON, default=list)
    hint: Mapped[str | None] = mapped_column(Text)
    source_diagnosis_id: Mapped[int | None] = mapped_column(ForeignKey("diagnoses.id", ondelete="SET NULL"))
    status: Mapped[str] = mapped_column(String(16), index=True)
    validation: Mapped[dict] = mapped_column(JSON, default=dict)
    proposed_by: Mapped[str] = mapped_column(String(128))
    reviewed_by: Mapped[str | None] = mapped_column(String(128))
    reviewed_at: Mapped[datetime | None] = mapped_column(UTCDateTime())
    review_note: Mapped[str | None] = mapped_column(Text)

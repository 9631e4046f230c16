from __future__ import annotations

from enum import StrEnum

from sqlalchemy import Boolean, ForeignKey, Integer, LargeBinary, String, Text
from sqlalchemy.orm import Mapped, mapped_column

from app.db.base import Base, CreatedAtMixin


class Verdict(StrEnum):
    CONFIRM = "confirm"
    CORRECT = "correct"


class Label(CreatedAtMixin, Base):
    __tablename__ = "labels"

    id: Mapped[int] = mapped_column(primary_key=True)
    diagnosis_id: Mapped[int] = mapped_column(ForeignKey("diagnoses.id", ondelete="CASCADE"), index=True)
    verdict: Mapped[str] = mapped_column(String(16))
    error_type: Mapped[str] = mapped_column(String(64))
    category: Mapped[str] = mapped_column(String(32))
    note: Mapped[str | None] = mapped_column(Text)
    created_by: Mapped[str] = mapped_column(String(128))


class LabelledCaseRow(CreatedAtMixin, Base):
    """A labelled failure embedded for retrieval (the DB side of `app.llm.ports.CaseStore`).
    One row per case id; re-labelling a diagnosis replaces its row."""

    __tablename__ = "labelled_cases"

    id: Mapped[int] = mapped_column(primary_key=True)
    case_id: Mapped[str] = mapped_column(String(128), unique=True)
    embedder: Mapped[str] = mapped_column(String(64), index=True)
    dim: Mapped[int] = mapped_column(Integer)
    vector: Mapped[bytes] = mapped_column(LargeBinary)  # float32, L2-normalised
    signature: Mapped[str] = mapped_column(Text)
    error_type: Mapped[str] = mapped_column(String(64))
    category: Mapped[str] = mapped_column(String(32))
    action: Mapped[str] = mapped_column(String(32))
    human_confirmed: Mapped[bool] = mapped_column(Boolean, default=False, index=True)
    evidence: Mapped[str | None] = mapped_column(Text)
    label_id: Mapped[int | None] = mapped_column(ForeignKey("labels.id", ondelete="SET NULL"))
    diagnosis_id: Mapped[int | None] = mapped_column(ForeignKey("diagnoses.id", ondelete="SET NULL"))

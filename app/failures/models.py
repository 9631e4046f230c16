from __future__ import annotations

from datetime import datetime
from enum import StrEnum

from sqlalchemy import String, Text
from sqlalchemy.orm import Mapped, mapped_column

from app.db.base import Base, UTCDateTime, utcnow


class GroupState(StrEnum):
    """What engineers decided about a failure group; a group with no row is `new`."""

    NEW = "new"
    KNOWN = "known"
    FIXING = "fixing"
    RESOLVED = "resolved"


class FailureGroupState(Base):
    """The human decision about one failure fingerprint. The group itself (jobs, hosts, hours)
    is a query over `diagnoses.fingerprint`; only the decision is stored."""

    __tablename__ = "failure_groups"

    fingerprint: Mapped[str] = mapped_column(String(16), primary_key=True)
    state: Mapped[str] = mapped_column(String(16))
    note: Mapped[str | None] = mapped_column(Text)
    updated_by: Mapped[str] = mapped_column(String(128))
    updated_at: Mapped[datetime] = mapped_column(UTCDateTime(), default=utcnow, onupdate=utcnow)
    assignee: Mapped[str | None] = mapped_column(String(128))
    ticket: Mapped[str | None] = mapped_column(String(2000))  # an http(s) link to the tracker
    # merged into another group: its jobs are counted and shown there (one level: merges follow
    # the target when the target is merged in turn)
    merged_into: Mapped[str | None] = mapped_column(String(16))
    resolved_at: Mapped[datetime | None] = mapped_column(UTCDateTime())  # a later failure = regressed

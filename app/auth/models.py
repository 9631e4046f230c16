from __future__ import annotations

from datetime import datetime
from enum import StrEnum

from sqlalchemy import String
from sqlalchemy.orm import Mapped, mapped_column

from app.db.base import Base, CreatedAtMixin, UTCDateTime


class TokenRole(StrEnum):
    """Ordered: each role may do everything the roles before it may."""

    SCHEDULER = "scheduler"
    ENGINEER = "engineer"
    ADMIN = "admin"

    @property
    def level(self) -> int:
        return list(TokenRole).index(self)


class ApiToken(CreatedAtMixin, Base):
    __tablename__ = "api_tokens"

    id: Mapped[int] = mapped_column(primary_key=True)
    name: Mapped[str] = mapped_column(String(128))
    role: Mapped[str] = mapped_column(String(16))
    token_hash: Mapped[str] = mapped_column(String(64), unique=True)
    revoked_at: Mapped[datetime | None] = mapped_column(UTCDateTime())

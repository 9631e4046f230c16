from __future__ import annotations

from datetime import datetime
from enum import IntEnum, StrEnum

from sqlalchemy import String
from sqlalchemy.orm import Mapped, mapped_column

from app.db.base import Base, CreatedAtMixin, UTCDateTime


class TokenRole(StrEnum):
    SCHEDULER = "scheduler"
    ENGINEER = "engineer"
    ADMIN = "admin"

    @property
    def level(self) -> int:
        return _LEVEL[self]


class _Level(IntEnum):
    SCHEDULER = 1
    ENGINEER = 2
    ADMIN = 3


_LEVEL = {TokenRole.SCHEDULER: _Level.SCHEDULER, TokenRole.ENGINEER: _Level.ENGINEER,
          TokenRole.ADMIN: _Level.ADMIN}


class ApiToken(CreatedAtMixin, Base):
    __tablename__ = "api_tokens"

    id: Mapped[int] = mapped_column(primary_key=True)
    name: Mapped[str] = mapped_column(String(128))
    role: Mapped[str] = mapped_column(String(16))
    token_hash: Mapped[str] = mapped_column(String(64), unique=True)
    revoked_at: Mapped[datetime | None] = mapped_column(UTCDateTime())

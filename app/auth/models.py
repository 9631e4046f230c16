from __future__ import annotations

from datetime import datetime
from enum import StrEnum

from sqlalchemy import JSON, ForeignKey, String
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
    # a scheduler token's clusters: it reaches only their jobs (None: every cluster)
    clusters: Mapped[list[str] | None] = mapped_column(JSON, default=None)


class WebSession(CreatedAtMixin, Base):
    """A browser sign-in: the cookie holds a random id whose sha256 is stored here, bound to the
    API token used to sign in (revoking the token ends its sessions). Signing out deletes the
    row, so a copied cookie is refused afterwards."""

    __tablename__ = "web_sessions"

    id: Mapped[int] = mapped_column(primary_key=True)
    session_hash: Mapped[str] = mapped_column(String(64), unique=True)
    token_id: Mapped[int] = mapped_column(ForeignKey("api_tokens.id", ondelete="CASCADE"), index=True)
    csrf_token: Mapped[str] = mapped_column(String(64))
    expires_at: Mapped[datetime] = mapped_column(UTCDateTime())

"""API tokens: random secrets shown once, stored as sha256 (a database leak reveals no token)."""

from __future__ import annotations

import hashlib
import secrets
from dataclasses import dataclass

from sqlalchemy import select
from sqlalchemy.orm import Session

from app.auth.models import ApiToken, TokenRole
from app.db.base import utcnow
from app.db.lookup import get_or_404

PREFIX = "ldx_"


@dataclass(frozen=True)
class Principal:
    token_id: int
    name: str
    role: TokenRole
    clusters: frozenset[str] | None = None  # None: every cluster

    def allows(self, needed: TokenRole) -> bool:
        return self.role.level >= needed.level

    def reaches(self, cluster: str) -> bool:
        return self.clusters is None or cluster in self.clusters


def hash_token(token: str) -> str:
    return hashlib.sha256(token.encode("utf-8", "surrogateescape")).hexdigest()


def create_token(*, session: Session, role: TokenRole, name: str,
                 clusters: list[str] | None = None) -> tuple[ApiToken, str]:
    """`clusters`: scope a scheduler token to these clusters' jobs. Engineers and admins read
    across clusters (the failure lists, groups and statistics are fleet-wide), so only a
    scheduler token takes a scope."""
    if clusters is not None:
        clusters = sorted({c.strip() for c in clusters if c.strip()})
        if not clusters:
            raise ValueError("a cluster scope names at least one cluster")
        if role is not TokenRole.SCHEDULER:
            raise ValueError("only scheduler tokens take a cluster scope; engineers and admins see every cluster")
    token = PREFIX + secrets.token_urlsafe(32)
    row = ApiToken(name=name, role=role.value, token_hash=hash_token(token), clusters=clusters)
    session.add(row)
    session.flush()
    return row, token


def authenticate(*, session: Session, token: str) -> Principal | None:
    row = session.scalars(select(ApiToken).where(ApiToken.token_hash == hash_token(token))).one_or_none()
    if row is None or row.revoked_at is not None:
        return None
    return Principal(row.id, row.name, TokenRole(row.role), frozenset(row.clusters) if row.clusters else None)


def revoke_token(*, session: Session, token_id: int) -> ApiToken:
    row = get_or_404(session, ApiToken, token_id, what="token")
    row.revoked_at = row.revoked_at or utcnow()
    return row


def list_tokens(*, session: Session) -> list[ApiToken]:
    return list(session.scalars(select(ApiToken).order_by(ApiToken.id)))

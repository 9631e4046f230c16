"""Browser sessions for the web pages: signing in with an API token creates a server-side
session; the browser holds only a random session id (HTTP-only cookie), and each form carries
the session's CSRF token. The session acts with the role of its token."""

from __future__ import annotations

import hmac
import secrets
from dataclasses import dataclass
from datetime import timedelta

from sqlalchemy import delete, select
from sqlalchemy.orm import Session

from app.auth.models import ApiToken, TokenRole, WebSession
from app.auth.service import Principal, authenticate, hash_token
from app.db.base import utcnow

SESSION_HOURS = 12


@dataclass(frozen=True)
class WebPrincipal:
    principal: Principal
    csrf_token: str

    def csrf_ok(self, submitted: str | None) -> bool:
        return bool(submitted) and hmac.compare_digest(self.csrf_token, submitted)


def start_session(*, session: Session, token: str) -> tuple[str, WebPrincipal] | None:
    """A new session for a valid API token: (cookie value, principal); None for a bad token."""
    principal = authenticate(session=session, token=token.strip())
    if principal is None:
        return None
    cookie = secrets.token_urlsafe(32)
    row = WebSession(session_hash=hash_token(cookie), token_id=principal.token_id,
                     csrf_token=secrets.token_urlsafe(32), expires_at=utcnow() + timedelta(hours=SESSION_HOURS))
    session.add(row)
    # expired sessions go when someone signs in; no background job needed
    session.execute(delete(WebSession).where(WebSession.expires_at < utcnow()))
    session.flush()
    return cookie, WebPrincipal(principal, row.csrf_token)


def resolve_session(*, session: Session, cookie: str) -> WebPrincipal | None:
    query = (select(WebSession, ApiToken).join(ApiToken, ApiToken.id == WebSession.token_id)
             .where(WebSession.session_hash == hash_token(cookie)))
    found = session.execute(query).one_or_none()
    if found is None:
        return None
    row, token = found
    if row.expires_at < utcnow() or token.revoked_at is not None:
        return None
    return WebPrincipal(Principal(token.id, token.name, TokenRole(token.role)), row.csrf_token)


def end_session(*, session: Session, cookie: str) -> bool:
    result = session.execute(delete(WebSession).where(WebSession.session_hash == hash_token(cookie)))
    return bool(result.rowcount)

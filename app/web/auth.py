"""Who is looking at a page: the session cookie resolved to the API token it was opened with.
Pages need `engineer` (as the API's read routes do), reviewing rules needs `admin`. Every POST
must carry the session's CSRF token; the login form carries a pre-session one (double submit)."""

from __future__ import annotations

import hmac
from collections.abc import Callable
from typing import Annotated
from urllib.parse import quote

from fastapi import Depends, Request

from app.api.deps import ServicesDep
from app.auth.models import TokenRole
from app.auth.sessions import WebPrincipal, resolve_session
from app.errors import AppError, Forbidden

PREFIX = "/ui"
SESSION_COOKIE = "logdx_session"
LOGIN_CSRF_COOKIE = "logdx_login_csrf"
PUBLIC_PAGES = frozenset({PREFIX + "/login"})  # every other page needs a session


class LoginRequired(AppError):
    """No valid session: pages answer with a redirect to the sign-in form."""

    status_code = 401
    code = "unauthorized"

    def __init__(self, next_url: str) -> None:
        super().__init__("sign in to see this page")
        self.next_url = next_url

    @property
    def location(self) -> str:
        return f"{PREFIX}/login?next={quote(self.next_url, safe='/?=&')}"


class CsrfRejected(AppError):
    status_code = 403
    code = "csrf_rejected"


def same_token(expected: str | None, submitted: str | None) -> bool:
    return bool(expected) and bool(submitted) and hmac.compare_digest(expected, submitted)


def require_web(role: TokenRole) -> Callable[..., WebPrincipal]:
    async def dependency(request: Request, services: ServicesDep) -> WebPrincipal:
        cookie = request.cookies.get(SESSION_COOKIE)
        here = request.url.path + (f"?{request.url.query}" if request.url.query else "")
        if request.method != "GET":
            here = PREFIX + "/"
        user = services.db.run(resolve_session, cookie=cookie) if cookie else None
        if user is None:
            raise LoginRequired(here)
        if request.method == "POST":
            form = await request.form()
            if not user.csrf_ok(form.get("csrf")):
                raise CsrfRejected("the form is stale or came from another site; reload the page and try again")
        if not user.principal.allows(role):
            raise Forbidden(f"this needs role {role.value} or higher; you signed in as {user.principal.role.value}",
                            detail={"needed": role.value, "role": user.principal.role.value})
        request.state.principal = user.principal
        request.state.web_user = user
        return user

    dependency.required_role = role  # read by the route-walking auth tests
    dependency.__name__ = f"require_web_{role.value}"
    return dependency


WebEngineer = Annotated[WebPrincipal, Depends(require_web(TokenRole.ENGINEER))]
WebAdmin = Annotated[WebPrincipal, Depends(require_web(TokenRole.ADMIN))]

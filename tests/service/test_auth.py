"""Walks every route the app serves: anonymous calls get 401 and under-privileged ones 403,
unless the route is explicitly public."""

from __future__ import annotations

import re

from fastapi.routing import iter_route_contexts

from app.api.app import PUBLIC_PATHS
from app.auth.models import TokenRole
from app.web.auth import PREFIX as WEB_PREFIX
from tests.service.conftest import bearer


def _required_role(route) -> TokenRole | None:
    stack = list(route.dependant.dependencies)
    while stack:
        dep = stack.pop()
        role = getattr(dep.call, "required_role", None)
        if role is not None:
            return role
        stack.extend(dep.dependencies)
    return None


def _routes(app):
    for ctx in iter_route_contexts(app.routes):
        for method in sorted(ctx.methods or ()):
            if method != "HEAD":
                yield method, ctx.path, ctx.original_route


def _concrete(path: str) -> str:
    return re.sub(r"\{[^}]+\}", "1", path)


def test_every_route_is_public_or_guarded(app, client, tokens):
    checked = 0
    for method, path, route in _routes(app):
        if path.startswith(WEB_PREFIX + "/"):
            continue  # pages answer with a sign-in redirect, not 401: tests/web/test_web_auth.py walks them
        role = _required_role(route) if hasattr(route, "dependant") else None
        if path in PUBLIC_PATHS:
            assert role is None, f"{method} {path} is listed public but requires {role}"
            continue
        assert role is not None, f"{method} {path} is neither public nor guarded by a role"
        url = _concrete(path)
        resp = client.request(method, url, json={} if method in ("POST", "PUT") else None)
        assert resp.status_code == 401, f"anonymous {method} {url}: {resp.status_code} {resp.text}"
        assert resp.json()["error"]["code"] == "unauthorized"
        for lower in TokenRole:
            if lower.level >= role.level:
                continue
            resp = client.request(method, url, headers=bearer(tokens[lower.value]),
                                  json={} if method in ("POST", "PUT") else None)
            assert resp.status_code == 403, f"{lower} {method} {url}: {resp.status_code} {resp.text}"
        checked += 1
    assert checked >= 15


def test_public_routes_answer_without_token(client):
    assert client.get("/healthz").json() == {"status": "ok"}
    assert client.get("/readyz").json()["status"] == "ready"
    assert "logdx_http_requests_total" in client.get("/metrics").text
    assert client.get("/openapi.json").status_code == 200


def test_revoked_token_is_refused(app, client, tokens):
    from app.auth.service import authenticate, revoke_token

    db = app.state.services.db
    principal = db.run(authenticate, token=tokens["admin"])
    assert client.get("/v1/stats", headers=bearer(tokens["admin"])).status_code == 200
    db.run(revoke_token, token_id=principal.token_id)
    assert client.get("/v1/stats", headers=bearer(tokens["admin"])).status_code == 401


def test_tokens_are_stored_hashed(app, tokens):
    from sqlalchemy import select

    from app.auth.models import ApiToken

    with app.state.services.db.transaction() as session:
        stored = set(session.scalars(select(ApiToken.token_hash)))
    assert not set(tokens.values()) & stored
    assert all(len(h) == 64 for h in stored)

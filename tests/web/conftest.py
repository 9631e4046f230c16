"""Web page tests reuse the service fixtures: an app built per test on a fresh data dir, on SQLite
and (when LOGDX_TEST_POSTGRES_URL is set) PostgreSQL."""

from __future__ import annotations

import re

from fastapi.testclient import TestClient

from tests.service.conftest import (  # noqa: F401
    admin,
    app,
    bearer,
    client,
    database_url,
    embedder,
    eng,
    sched,
    service_pipeline,
    settings,
    tokens,
)

CSRF = re.compile(r'name="csrf" value="([^"]+)"')


def csrf_of(html: str) -> str:
    match = CSRF.search(html)
    assert match, "the page has no CSRF field"
    return match.group(1)


def sign_in(client: TestClient, token: str) -> str:
    """Signs in through the form; returns the CSRF token of the session's pages."""
    form = client.get("/ui/login")
    assert form.status_code == 200
    resp = client.post("/ui/login", data={"token": token, "csrf": csrf_of(form.text), "next": "/ui/"},
                       follow_redirects=False)
    assert resp.status_code == 303, resp.text
    page = client.get("/ui/")
    assert page.status_code == 200
    return csrf_of(page.text)

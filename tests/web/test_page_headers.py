"""Pages carry the browser's defences (CSP, no framing, no sniffing, no referrer), asset URLs
never come from the Host header, and the search box matches `%` and `_` literally."""

from __future__ import annotations

from tests.service.conftest import new_job, sample_log
from tests.web.conftest import sign_in


def test_pages_send_security_headers_and_every_response_nosniff(client, tokens, sched):
    for url in ("/ui/login", "/ui/static/app.css"):
        resp = client.get(url)
        assert resp.status_code == 200
        assert resp.headers["X-Content-Type-Options"] == "nosniff"
    sign_in(client, tokens["engineer"])
    for url in ("/ui/", "/ui/login", "/ui/jobs/12345"):
        resp = client.get(url)
        csp = resp.headers["Content-Security-Policy"]
        assert "default-src 'self'" in csp and "frame-ancestors 'none'" in csp and "unsafe-inline" not in csp
        assert resp.headers["X-Frame-Options"] == "DENY"
        assert resp.headers["Referrer-Policy"] == "no-referrer"
        assert resp.headers["X-Content-Type-Options"] == "nosniff"
    api = client.get("/healthz")
    assert api.headers["X-Content-Type-Options"] == "nosniff"


def test_asset_urls_do_not_come_from_the_host_header(client):
    resp = client.get("/ui/login", headers={"Host": "evil.example:666"})
    assert resp.status_code == 200
    assert "evil.example" not in resp.text
    assert 'href="/ui/static/app.css"' in resp.text


def test_search_matches_percent_and_underscore_literally(client, tokens, sched):
    for external_id in ("run_1", "runX1", "100%done", "1000done"):
        job = new_job(client, sched, external_id=external_id)["id"]
        assert client.put(f"/v1/jobs/{job}/log", content=sample_log(), headers=sched).status_code == 201
        assert client.post(f"/v1/jobs/{job}/diagnoses", headers=sched).status_code == 200
    sign_in(client, tokens["engineer"])
    assert "runX1" in client.get("/ui/", params={"q": "run"}).text
    underscore = client.get("/ui/", params={"q": "run_1"}).text
    assert "run_1" in underscore and "runX1" not in underscore
    percent = client.get("/ui/", params={"q": "100%d"}).text
    assert "100%done" in percent and "1000done" not in percent

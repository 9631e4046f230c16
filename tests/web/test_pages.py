"""The pages through HTTP (TestClient): sign-in, sessions, CSRF, roles, and what each page
shows of the stored data."""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta

from fastapi.routing import iter_route_contexts

from app.web.auth import PREFIX, PUBLIC_PAGES, SESSION_COOKIE
from tests.service.conftest import new_job, sample_log
from tests.web.conftest import csrf_of, sign_in


def _recent(hours: float) -> str:
    return (datetime.now(UTC) - timedelta(hours=hours)).isoformat()


def diagnosed_job(client, sched, external_id="j1", log=None, **fields) -> tuple[int, dict]:
    """A job that failed an hour ago after running for ten hours, with its log diagnosed."""
    fields = {"started_at": _recent(11), "ended_at": _recent(1), **fields}
    job = new_job(client, sched, external_id, **fields)
    assert client.put(f"/v1/jobs/{job['id']}/log", content=log or sample_log(), headers=sched).status_code == 201
    resp = client.post(f"/v1/jobs/{job['id']}/diagnoses", headers=sched)
    assert resp.status_code == 200, resp.text
    return job["id"], resp.json()


def _ui_routes(app):
    for ctx in iter_route_contexts(app.routes):
        if ctx.path.startswith(PREFIX + "/") and ctx.methods:
            for method in sorted(ctx.methods - {"HEAD"}):
                yield method, ctx.path, ctx.original_route


def _role(route):
    stack = list(route.dependant.dependencies)
    while stack:
        dep = stack.pop()
        if getattr(dep.call, "required_role", None) is not None:
            return dep.call.required_role
        stack.extend(dep.dependencies)
    return None


def test_every_page_needs_a_session_except_sign_in(app, client, tokens):
    checked = 0
    for method, path, route in _ui_routes(app):
        role = _role(route)
        if path in PUBLIC_PAGES:
            assert role is None
            continue
        assert role is not None, f"{method} {path} is not guarded"
        url = re.sub(r"\{[^}]+\}", "1", path)
        resp = client.request(method, url, follow_redirects=False, data={} if method == "POST" else None)
        if path == "/ui/failures/rows":  # polled by script: a 401 it can act on, not a login page
            assert resp.status_code == 401, resp.text
            continue
        assert resp.status_code == 303, f"anonymous {method} {url}: {resp.status_code}"
        assert resp.headers["location"].startswith("/ui/login?next=")
        checked += 1
    assert checked >= 10


def test_sign_in_redirects_back_and_refuses_bad_tokens(client, tokens):
    first = client.get("/ui/jobs/5?diagnosis=2", follow_redirects=False)
    assert first.headers["location"] == "/ui/login?next=/ui/jobs/5?diagnosis=2"
    form = client.get(first.headers["location"])
    bad = client.post("/ui/login", data={"token": "ldx_nope", "csrf": csrf_of(form.text), "next": "/ui/"})
    assert bad.status_code == 401 and "Unknown or revoked token" in bad.text
    assert SESSION_COOKIE not in client.cookies
    form = client.get("/ui/login?next=/ui/stats")
    ok = client.post("/ui/login", data={"token": tokens["engineer"], "csrf": csrf_of(form.text), "next": "/ui/stats"},
                     follow_redirects=False)
    assert ok.status_code == 303 and ok.headers["location"] == "/ui/stats"
    cookie = ok.headers["set-cookie"]
    assert "HttpOnly" in cookie and "SameSite=lax" in cookie
    assert tokens["engineer"] not in cookie  # the browser holds a session id, not the token


def test_sign_in_refuses_foreign_redirects_and_forged_forms(client, tokens):
    form = client.get("/ui/login")
    ok = client.post("/ui/login", data={"token": tokens["engineer"], "csrf": csrf_of(form.text),
                                        "next": "//evil.example/ui/"}, follow_redirects=False)
    assert ok.headers["location"] == "/ui/"
    client.cookies.clear()
    client.get("/ui/login")
    forged = client.post("/ui/login", data={"token": tokens["engineer"], "csrf": "made-up"})
    assert forged.status_code == 403 and "expired" in forged.text
    assert SESSION_COOKIE not in client.cookies


def test_scheduler_tokens_cannot_use_the_pages(client, tokens):
    form = client.get("/ui/login")
    resp = client.post("/ui/login", data={"token": tokens["scheduler"], "csrf": csrf_of(form.text)})
    assert resp.status_code == 403 and "cannot use these pages" in resp.text
    assert client.get("/ui/", follow_redirects=False).status_code == 303


def test_forms_without_the_session_csrf_token_are_refused(client, tokens, sched):
    job_id, diag = diagnosed_job(client, sched)
    sign_in(client, tokens["engineer"])
    resp = client.post(f"/ui/jobs/{job_id}/label", data={"diagnosis_id": diag["id"], "verdict": "confirm",
                                                         "csrf": "stale"})
    assert resp.status_code == 403 and "stale" in resp.text and "<html" in resp.text
    assert client.get(f"/v1/diagnoses/{diag['id']}", headers=sched).json()["labels"] == []


def test_sign_out_ends_the_session_even_for_a_copied_cookie(client, tokens):
    csrf = sign_in(client, tokens["engineer"])
    cookie = client.cookies[SESSION_COOKIE]
    out = client.post("/ui/logout", data={"csrf": csrf}, follow_redirects=False)
    assert out.status_code == 303 and out.headers["location"] == "/ui/login?signed_out=1"
    client.cookies.set(SESSION_COOKIE, cookie)
    again = client.get("/ui/", follow_redirects=False)
    assert again.status_code == 303 and again.headers["location"].startswith("/ui/login")


def test_revoking_the_token_ends_its_sessions(app, client, tokens):
    from app.auth.service import authenticate, revoke_token

    sign_in(client, tokens["engineer"])
    db = app.state.services.db
    db.run(revoke_token, token_id=db.run(authenticate, token=tokens["engineer"]).token_id)
    assert client.get("/ui/", follow_redirects=False).status_code == 303


def test_engineers_cannot_review_rules(client, tokens, eng):
    body = {"pattern": "frobnicator exploded", "error_type": "RuntimeError", "evidence": ["frobnicator exploded"]}
    rule = client.post("/v1/rules/proposed", json=body, headers=eng).json()
    csrf = sign_in(client, tokens["engineer"])
    page = client.get("/ui/rules")
    assert "frobnicator exploded" in page.text and "needs an admin token" in page.text
    resp = client.post(f"/ui/rules/proposed/{rule['id']}/approve", data={"csrf": csrf})
    assert resp.status_code == 403 and "needs role admin" in resp.text
    assert client.get(f"/v1/rules/proposed/{rule['id']}", headers=eng).json()["status"] == "proposed"


def test_failures_list_filters_search_and_live_rows(client, tokens, sched):
    first, _ = diagnosed_job(client, sched, "alpha-1", cluster="alpha")
    sign_in(client, tokens["engineer"])
    page = client.get("/ui/")
    latest = int(re.search(r'data-latest="(\d+)"', page.text).group(1))
    assert "alpha/alpha-1" in page.text and "ECCError" in page.text and "unlabelled" in page.text
    assert client.get("/ui/failures/rows", params={"after": latest}).text.strip() == ""
    diagnosed_job(client, sched, "beta-7", cluster="beta", hosts=["node-99"])
    rows = client.get("/ui/failures/rows", params={"after": latest})
    assert "beta/beta-7" in rows.text and "alpha-1" not in rows.text
    assert int(rows.headers["X-Latest-Diagnosis"]) > latest
    assert "beta-7" not in client.get("/ui/", params={"cluster": "alpha"}).text
    found = client.get("/ui/", params={"q": "node-99"}).text
    assert "beta-7" in found and "alpha-1" not in found
    empty = client.get("/ui/", params={"error_type": "NaNLoss"})
    assert "No diagnosed job matches these filters" in empty.text


def test_job_page_highlights_evidence_and_a_correction_moves_the_statistics(client, tokens, sched):
    job_id, diag = diagnosed_job(client, sched)
    evidence = diag["diagnosis"]["root_cause"]["evidence"][0]
    csrf = sign_in(client, tokens["engineer"])
    page = client.get(f"/ui/jobs/{job_id}")
    assert page.status_code == 200
    row = re.search(rf'<div class="ln [^"]*evidence[^"]*" id="L{evidence["line"]}"', page.text)
    assert row, "the evidence line is highlighted in the compressed log"
    assert 'id="jump-evidence"' in page.text and "download raw log" in page.text
    assert 'id="probes"' in page.text  # the controller's spot
    stats = client.get("/ui/stats").text
    assert re.search(r'data-type="ECCError"', stats) and 'data-type="NVLinkError"' not in stats
    resp = client.post(f"/ui/jobs/{job_id}/label", data={"csrf": csrf, "diagnosis_id": diag["id"], "verdict": "correct",
                                                         "error_type": "NVLinkError", "note": "links down"},
                       follow_redirects=False)
    assert resp.status_code == 303
    after = client.get(resp.headers["location"])
    assert "Label saved" in after.text and "links down" in after.text
    stats = client.get("/ui/stats").text
    assert 'data-type="NVLinkError"' in stats and 'data-type="ECCError"' not in stats
    assert re.search(r'id="agreement">0%<', stats)  # one labelled diagnosis, and it was wrong
    assert "corrected" in client.get("/ui/").text


def test_a_correction_without_a_type_is_a_clear_error(client, tokens, sched):
    job_id, diag = diagnosed_job(client, sched)
    csrf = sign_in(client, tokens["engineer"])
    resp = client.post(f"/ui/jobs/{job_id}/label", data={"csrf": csrf, "diagnosis_id": diag["id"], "verdict": "correct"})
    assert resp.status_code == 422 and "a correction must give error_type" in resp.text
    other, _ = diagnosed_job(client, sched, "j2")
    resp = client.post(f"/ui/jobs/{other}/label", data={"csrf": csrf, "diagnosis_id": diag["id"], "verdict": "confirm"})
    assert resp.status_code == 422 and "is not a diagnosis of job" in resp.text


def test_groups_collect_one_failure_across_jobs_and_take_a_state(client, tokens, sched):
    diagnosed_job(client, sched, "a", hosts=["node-1"])
    diagnosed_job(client, sched, "b", log=sample_log(host="node-77"), hosts=["node-2"])
    csrf = sign_in(client, tokens["engineer"])
    page = client.get("/ui/groups").text
    fingerprints = set(re.findall(r'id="g-([0-9a-f]{16})"', page))
    assert len(fingerprints) == 1, "the same failure on two hosts is one group"
    fp = fingerprints.pop()
    assert '<span class="badge new">new</span>' in page
    assert re.search(r'<td class="num">2</td>', page)
    resp = client.post(f"/ui/groups/{fp}/state", data={"csrf": csrf, "state": "fixing", "note": "TICKET-12"},
                       follow_redirects=False)
    assert resp.status_code == 303
    page = client.get("/ui/groups").text
    assert "TICKET-12" in page and '<span class="badge new">new</span>' not in page
    assert '<option value="fixing" selected>' in page
    listed = client.get("/ui/", params={"group": fp}).text
    assert "c1/a" in listed and "c1/b" in listed
    assert client.post("/ui/groups/zzzz/state", data={"csrf": csrf, "state": "known"}).status_code == 422
    assert client.post(f"/ui/groups/{'0' * 16}/state", data={"csrf": csrf, "state": "known"}).status_code == 404


def test_rules_page_tries_approves_and_activates_a_proposal(client, tokens, eng, sched):
    body = {"pattern": r"frobnicator exploded at step \d+", "error_type": "RuntimeError",
            "evidence": ["frobnicator exploded at step 12"]}
    rule = client.post("/v1/rules/proposed", json=body, headers=eng).json()
    csrf = sign_in(client, tokens["admin"])
    tried = client.post(f"/ui/rules/proposed/{rule['id']}/try",
                        data={"csrf": csrf, "text": "ok\nfrobnicator exploded at step 7\nfine\n"})
    assert "1 of 3 lines match" in tried.text and "line 2" in tried.text
    resp = client.post(f"/ui/rules/proposed/{rule['id']}/approve", data={"csrf": csrf}, follow_redirects=False)
    assert resp.status_code == 303
    page = client.get(resp.headers["location"]).text
    new_id = rule["rule"]["id"]
    assert f'id="r-{new_id}"' in page and "active now" in page
    job_id, diag = diagnosed_job(client, sched, "frob", log=b"step 1\nfrobnicator exploded at step 99\n")
    assert diag["diagnosis"]["root_cause"]["rule_id"] == new_id
    hits = re.search(rf'id="r-{new_id}".*?<td class="num">(\d+)</td>', client.get("/ui/rules").text, re.S)
    assert hits and hits.group(1) == "1"


def test_error_pages_are_html_for_pages_and_json_for_the_api(client, tokens, eng):
    sign_in(client, tokens["engineer"])
    page = client.get("/ui/jobs/999")
    assert page.status_code == 404 and page.headers["content-type"].startswith("text/html")
    assert "job 999 does not exist" in page.text
    assert client.get("/ui/nothing-here").status_code == 404
    api = client.get("/v1/jobs/999", headers=eng)
    assert api.status_code == 404 and api.json()["error"]["code"] == "not_found"


def test_raw_log_download_and_empty_states(client, tokens, sched):
    sign_in(client, tokens["engineer"])
    assert "No diagnosed jobs yet" in client.get("/ui/").text
    assert "No failure groups" in client.get("/ui/groups").text
    assert "No failed jobs in this window" in client.get("/ui/stats").text
    assert "No rules waiting for review" in client.get("/ui/rules").text
    job_id, _ = diagnosed_job(client, sched)
    raw = client.get(f"/ui/jobs/{job_id}/log/raw")
    assert raw.status_code == 200 and raw.content == sample_log()


def test_statistics_trend_draws_days_without_failures(client, tokens, sched):
    # the newer job ends today and the older one three days earlier, at any time of day (an hour
    # ago is yesterday just after midnight, UTC)
    now = datetime.now(UTC)
    ended = now - min(timedelta(hours=1), (now - now.replace(hour=0, minute=0, second=0, microsecond=0)) / 2)
    old = ended - timedelta(days=3)
    diagnosed_job(client, sched, "old", started_at=(old - timedelta(hours=5)).isoformat(), ended_at=old.isoformat())
    diagnosed_job(client, sched, "new", started_at=(ended - timedelta(hours=10)).isoformat(), ended_at=ended.isoformat())
    sign_in(client, tokens["engineer"])
    page = client.get("/ui/stats", params={"range": "7d", "interval": "day"}).text
    trend = re.search(r'<svg class="columns".*?</svg>', page, re.S).group(0)
    assert trend.count("<rect") == 4  # 3 days ago, two empty days, today
    assert page.count(": 1 job ·") + page.count(": 1 job<") == 2  # the per-day counts under the chart


def test_job_page_shows_attempts_and_controller_actions(app, client, tokens, sched):
    from app.actions.service import finish_action, record_action

    job_id, first = diagnosed_job(client, sched, "requeued")
    db = app.state.services.db
    action = db.run(record_action, job_id=job_id, kind="isolate_and_restart", actor="controller", dry_run=False,
                    diagnosis_id=first["id"], params={"drain": ["node-12"]})
    db.run(finish_action, action_id=action.id, status="succeeded", result={"requeued": True})
    new_job(client, sched, "requeued", attempt=2, started_at=_recent(0.5), ended_at=_recent(0.1))
    assert client.put(f"/v1/jobs/{job_id}/log?attempt=2", content=b"step 1\nKeyError: 'x'\n",
                      headers=sched).status_code == 201
    second = client.post(f"/v1/jobs/{job_id}/diagnoses", headers=sched).json()
    sign_in(client, tokens["engineer"])
    page = client.get(f"/ui/jobs/{job_id}").text
    timeline = re.search(r'<ol class="timeline">.*?</ol>', page, re.S).group(0)
    assert timeline.index("Attempt 1") < timeline.index(f"diagnosis #{first['id']}") < \
        timeline.index("isolate and restart (succeeded)") < timeline.index("restarted") < \
        timeline.index("Attempt 2") < timeline.index(f"diagnosis #{second['id']}: KeyError")
    assert "node-12" in page and "succeeded" in page  # the audit row
    older = client.get(f"/ui/jobs/{job_id}", params={"diagnosis": first["id"]}).text
    assert "older diagnosis" in older and "ECCError" in older

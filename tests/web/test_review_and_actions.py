"""Rule review that shows what a rule would change, and the restart controller's record on the job
page, in a real browser (Debian's chromium, headless, through playwright) against `logdx serve`
with the demo data, the local scheduler and real probe workers (a fault injected on two nodes);
the server-side checks through real HTTP as well. The tests run in file order on one server: the
last one approves a rule that changes many diagnoses."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import httpx
import pytest

from app import __version__
from app.auth.models import TokenRole
from app.controller.schedulers.local import LocalScheduler
from tests.controller.logs import progress, text, xid_fault
from tests.service.live import REPO, LiveServer, free_port, issue_token
from tests.web.conftest import csrf_of
from tests.web.test_browser import BROWSER_ARGS, CHROMIUM, shot

from playwright.sync_api import expect, sync_playwright  # noqa: E402 - test_browser skips without it

NODES = ["n1", "n2", "n3", "n4", "n5", "n6"]
FAIL_THEN_RUN = "import os, sys, time; sys.exit(1) if os.environ['LOGDX_RESTART_COUNT'] == '0' else time.sleep(60)"
BROAD = {"pattern": "(?i)error", "error_type": "RuntimeError", "category": "script",
         "evidence": ["RuntimeError: CUDA error: unspecified launch failure"], "family": "proposed"}


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    data = tmp_path_factory.mktemp("review-data")
    rules = data / "rules"
    shutil.copytree(REPO / "rules", rules)
    env = {"LOGDX_DATA_DIR": str(data), "LOGDX_RULES_DIR": str(rules),
           "LOGDX_CONTROLLER_LOCAL_NODES": '["' + '","'.join(NODES) + '"]',
           "LOGDX_CONTROLLER_PROBE_TIMEOUT_S": "5", "LOGDX_CONTROLLER_PROBE_PORT": str(free_port()),
           # n2 and n3 leave the allgather before it starts: both fail the probe
           "LOGDX_PROBE_FAULTS": "n2=exit_before,n3=exit_before"}
    live = LiveServer(env).start(timeout=60)
    demo = subprocess.run([sys.executable, "-m", "app.cli", "demo-data"], cwd=REPO, capture_output=True, text=True,
                          env={**os.environ, **env, "PYTHONPATH": str(REPO)}, timeout=300)
    assert demo.returncode == 0, demo.stderr
    url = f"sqlite:///{data / 'logdx.db'}"
    live.tokens = {role.value: issue_token(url, role, f"{role.value}-review") for role in TokenRole}
    live.data = data
    yield live
    live.stop()


def api(server, role: str) -> httpx.Client:
    return httpx.Client(base_url=server.url, headers={"Authorization": f"Bearer {server.tokens[role]}"}, timeout=120)


def browser_page(pw, server):
    browser = pw.chromium.launch(executable_path=str(CHROMIUM), headless=True, args=BROWSER_ARGS)
    page = browser.new_context(viewport={"width": 1366, "height": 900}).new_page()
    page.goto(server.url + "/ui/login")
    page.get_by_label("API token").fill(server.tokens["admin"])
    page.get_by_role("button", name="Sign in").click()
    expect(page.get_by_role("heading", name="Failures")).to_be_visible()
    return browser, page


def test_probe_results_and_the_recovery_run_in_words(server, tmp_path):
    local = LocalScheduler(Path(server.data) / "local-scheduler", NODES)
    ext = local.submit([sys.executable, "-c", FAIL_THEN_RUN], workdir=tmp_path, nodes=3)
    assert local.wait(ext, timeout_s=30).state == "FAILED"
    with api(server, "scheduler") as http:
        job = http.post("/v1/jobs", json={"cluster": "lab", "external_id": ext, "hosts": ["n1", "n2", "n3"],
                                          "gpu_count": 24, "started_at": "2026-01-01T00:00:00Z",
                                          "ended_at": "2026-01-01T02:00:00Z", "state": "failed"}).json()["id"]
        log = text(progress(1, 30, host="n2"), xid_fault("n2"), xid_fault("n3"))
        assert http.put(f"/v1/jobs/{job}/log", content=log.encode()).status_code == 201
        assert http.post(f"/v1/jobs/{job}/diagnoses").status_code == 200
    with api(server, "admin") as http:
        assert http.put("/v1/clusters/lab/controller", json={"actions_enabled": True}).status_code == 200
    with api(server, "scheduler") as http:
        run = http.post(f"/v1/jobs/{job}/recover", json={"idempotency_key": "review-1"})
        assert run.status_code == 200, run.text
    outcome = run.json()["outcome"]
    assert sorted(outcome["probe"]["faulty"]) == ["n2", "n3"], outcome
    drained, refused = outcome["drained"], outcome["breaker"]  # 6 nodes, 25 %: one drain gets through
    assert len(drained) == 1 and len(refused) == 1

    with sync_playwright() as pw:
        browser, page = browser_page(pw, server)
        page.goto(f"{server.url}/ui/jobs/{job}")
        section = page.locator("#controller")
        expect(section).not_to_contain_text("No node-probe results recorded")
        probe = section.locator("article.probe").first
        expect(probe).to_contain_text("Tested 3 hosts (n1, n2, n3)")
        expect(probe).to_contain_text("n2, n3 found faulty")
        for host, verdict in (("n1", "passed"), ("n2", "faulty"), ("n3", "faulty")):
            expect(probe.locator("tr").filter(has_text=host).locator("td").nth(1)).to_have_text(verdict)
        recovery = section.locator("article.recovery").first
        expect(recovery).to_contain_text("Planned: isolate and restart")
        expect(recovery).to_contain_text("Probed n1, n2, n3 with the allgather test: n2, n3 faulty.")
        expect(recovery).to_contain_text(f"Drained {drained[0]}: failed the node probe")
        expect(recovery).to_contain_text(f"Refused to drain {refused[0]}: circuit breaker")
        expect(recovery).to_contain_text("Requeued the job")
        # the raw record is folded away, and readable: quotes, not \u0027
        raw = recovery.locator("details")
        expect(raw.locator("pre").first).not_to_be_visible()
        raw.locator("summary").click()
        expect(raw.locator("pre").first).to_be_visible()
        html = page.content()
        assert "\\u0027" not in html and "step None" not in html
        shot(page, "review-02-job-recovery")
        browser.close()


def test_a_confirmation_for_another_count_is_refused(server):
    """The checkbox carries the count it confirmed: a stale confirmation does not approve."""
    with api(server, "engineer") as http:
        rule_id = http.post("/v1/rules/proposed", json={**BROAD, "pattern": "(?i)err(or)?"}).json()["id"]
        changed = http.get(f"/v1/rules/proposed/{rule_id}/impact").json()["changed"]
    with httpx.Client(base_url=server.url, timeout=120, follow_redirects=True) as web:
        form = web.get("/ui/login")
        login = web.post("/ui/login", data={"token": server.tokens["admin"], "csrf": csrf_of(form.text),
                                            "next": "/ui/rules"})
        assert login.status_code == 200, login.text
        csrf = csrf_of(login.text)
        for confirm in (None, str(changed - 1)):
            data = {"csrf": csrf, **({"confirm_changed": confirm} if confirm is not None else {})}
            resp = web.post(f"/ui/rules/proposed/{rule_id}/approve", data=data)
            assert resp.status_code == 409, resp.text
            assert f"I have reviewed the {changed} changed diagnoses" in resp.text
        with api(server, "engineer") as http:
            assert http.get(f"/v1/rules/proposed/{rule_id}").json()["status"] == "proposed"
        resp = web.post(f"/ui/rules/proposed/{rule_id}/reject", data={"csrf": csrf})
        assert resp.status_code == 200


def test_a_broad_rule_shows_its_impact_and_needs_a_confirmation(server):
    with api(server, "engineer") as http:
        proposed = http.post("/v1/rules/proposed", json=BROAD)
        assert proposed.status_code == 201, proposed.text
        rule_id = proposed.json()["id"]
        impact = http.get(f"/v1/rules/proposed/{rule_id}/impact").json()
    assert impact["changed"] > 0.05 * impact["done"], impact  # what makes it broad

    with sync_playwright() as pw:
        browser, page = browser_page(pw, server)
        errors: list[str] = []
        page.on("pageerror", lambda exc: errors.append(str(exc)))
        page.goto(server.url + "/ui/rules")
        proposal = page.locator(f"#p-{rule_id}")
        expect(proposal.locator(".validation")).to_contain_text("valid")
        expect(proposal.locator(f"#impact-{rule_id}")).to_contain_text(
            f"changes {impact['changed']} of {impact['done']} stored diagnoses")
        hrefs = proposal.locator(".impact-examples a").evaluate_all("links => links.map(a => a.getAttribute('href'))")
        assert hrefs and set(hrefs) <= {f"/ui/jobs/{c['job_id']}" for c in impact["changed_logs"]}, hrefs
        confirm = proposal.get_by_label(f"I have reviewed the {impact['changed']} changed diagnoses")
        expect(confirm).not_to_be_checked()
        shot(page, "review-01-broad-rule")

        # without JavaScript's `required` (a form sent by hand, an old browser) the server refuses
        page.evaluate("document.querySelectorAll('input[name=confirm_changed]').forEach(e => e.required = false)")
        proposal.get_by_role("button", name="Approve").click()
        expect(page.get_by_role("alert")).to_contain_text("Not approved")
        with api(server, "engineer") as http:
            assert http.get(f"/v1/rules/proposed/{rule_id}").json()["status"] == "proposed"

        # followed an example before deciding: the job opens
        page.locator(f"#p-{rule_id} .impact-examples a").first.click()
        expect(page.locator("h1")).to_be_visible()
        assert "/ui/jobs/" in page.url

        page.goto(server.url + "/ui/rules")
        proposal = page.locator(f"#p-{rule_id}")
        proposal.get_by_label(f"I have reviewed the {impact['changed']} changed diagnoses").check()
        proposal.get_by_role("button", name="Approve").click()
        expect(page.get_by_role("status").filter(has_text="approved")).to_be_visible()
        # the footer: the package version and the rules hash, each named
        footer = page.locator("footer")
        expect(footer).to_contain_text(f"logdx {__version__}")
        expect(footer).to_contain_text("rules version")
        assert errors == [], errors
        browser.close()
    with api(server, "engineer") as http:
        assert http.get(f"/v1/rules/proposed/{rule_id}").json()["status"] == "approved"

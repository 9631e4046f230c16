"""The pages in a real browser: Debian's chromium, headless, driven by playwright, against a
server started as the README says (`logdx serve`), with a real-world log sent by the scheduler
API. Screenshots of every page go to artifacts/ui/ (git-ignored) for a human to look at.

Skipped where no chromium is installed, unless LOGDX_REQUIRE_BROWSER=1 (CI sets it: .ci/run
installs chromium, and a missing browser must fail there, not skip)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from datetime import UTC, datetime, timedelta
from pathlib import Path

import httpx
import pytest

from app.auth.models import TokenRole
from tests.service.live import REPO, LiveServer, free_port, issue_token

CHROMIUM = Path(os.environ.get("LOGDX_CHROMIUM", "/usr/bin/chromium"))
ARTIFACTS = REPO / "artifacts" / "ui"
REAL_LOG = REPO / "examples" / "realworld" / "010-oom-one-rank-then-nccl-watchdog-timeouts.log"
BROWSER_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-component-update"]

try:
    from playwright.sync_api import expect, sync_playwright
except ImportError:  # pragma: no cover - depends on the machine
    sync_playwright = None

if sync_playwright is None or not CHROMIUM.exists():
    if os.environ.get("LOGDX_REQUIRE_BROWSER") == "1":
        raise RuntimeError(f"UI tests need playwright and {CHROMIUM} (LOGDX_REQUIRE_BROWSER=1)")
    pytest.skip(f"needs the playwright package and {CHROMIUM}", allow_module_level=True)


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    data = tmp_path_factory.mktemp("ui-data")
    rules = data / "rules"
    shutil.copytree(REPO / "rules", rules)
    env = {"LOGDX_DATA_DIR": str(data), "LOGDX_RULES_DIR": str(rules)}
    port = int(os.environ["LOGDX_TEST_UI_PORT"]) if os.environ.get("LOGDX_TEST_UI_PORT") else free_port()
    live = LiveServer(env, port=port).start(timeout=60)
    # the one-step demo of the README, into the same data dir the server uses
    demo = subprocess.run([sys.executable, "-m", "app.cli", "demo-data"], cwd=REPO, capture_output=True, text=True,
                          env={**os.environ, **env, "PYTHONPATH": str(REPO)}, timeout=300)
    assert demo.returncode == 0, demo.stderr
    url = f"sqlite:///{data / 'logdx.db'}"
    live.tokens = {role.value: issue_token(url, role, f"{role.value}-ui") for role in TokenRole}
    yield live
    live.stop()


def send_job(server: LiveServer, external_id: str, log: Path) -> dict:
    """What a Slurm epilog does: register the job, upload its log, ask for a diagnosis."""
    headers = {"Authorization": f"Bearer {server.tokens['scheduler']}"}
    now = datetime.now(UTC)
    with httpx.Client(base_url=server.url, headers=headers, timeout=60) as http:
        job = http.post("/v1/jobs", json={
            "cluster": "gpu-a", "external_id": external_id, "user": "oncall-test", "hosts": ["gpu-a-017", "gpu-a-018"],
            "gpu_count": 16, "started_at": (now - timedelta(hours=6)).isoformat(), "ended_at": now.isoformat(),
            "state": "failed"}).json()
        assert http.put(f"/v1/jobs/{job['id']}/log", content=log.read_bytes()).status_code == 201
        diagnosis = http.post(f"/v1/jobs/{job['id']}/diagnoses")
        assert diagnosis.status_code == 200, diagnosis.text
        return diagnosis.json()


def shot(page, name: str) -> None:
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    page.evaluate("window.scrollTo(0, 0)")  # a full-page shot draws the sticky header where it is
    page.screenshot(path=str(ARTIFACTS / f"{name}.png"), full_page=True)


def type_count(page, error_type: str) -> int:
    row = page.locator(f'#by-type tr[data-type="{error_type}"] td.jobs')
    return int(row.inner_text()) if row.count() else 0


def test_an_engineer_works_through_the_pages(server):
    first = send_job(server, "4242", REAL_LOG)
    assert first["diagnosis"]["root_cause"]["error_type"] == "OutOfMemoryError"
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=str(CHROMIUM), headless=True, args=BROWSER_ARGS)
        context = browser.new_context(viewport={"width": 1366, "height": 850})
        page = context.new_page()
        errors: list[str] = []
        page.on("pageerror", lambda exc: errors.append(str(exc)))

        # sign in
        page.goto(server.url + "/ui/")
        expect(page).to_have_url(server.url + "/ui/login?next=/ui/")
        shot(page, "01-login")
        page.get_by_label("API token").fill(server.tokens["admin"])
        page.get_by_role("button", name="Sign in").click()
        expect(page.get_by_role("heading", name="Failures")).to_be_visible()

        # the diagnosed real-world job is on top of the list
        first_row = page.locator("#failures tbody tr").first
        expect(first_row).to_contain_text("gpu-a/4242")
        expect(first_row).to_contain_text("OutOfMemoryError")
        expect(first_row).to_contain_text("unlabelled")
        shot(page, "02-failures")

        # a new diagnosis appears without a reload
        send_job(server, "4243", REAL_LOG)
        expect(page.locator("#failures tbody tr").first).to_contain_text("gpu-a/4243", timeout=20_000)
        expect(page.locator("#live")).to_contain_text("new diagnos")

        # keyboard: j selects the first row, k stays on it, Enter opens it
        page.locator("body").click(position={"x": 5, "y": 400})
        page.keyboard.press("j")
        expect(page.locator("tr.nav-row.selected")).to_have_count(1)
        page.get_by_role("link", name="gpu-a/4242").click()

        # the job: evidence highlighted inside the compressed log
        expect(page.get_by_role("heading", name="gpu-a/4242")).to_be_visible()
        evidence = page.locator(".log .ln.evidence")
        expect(evidence.first).to_contain_text("CUDA out of memory")
        page.locator("#jump-evidence").click()
        expect(evidence.first).to_be_in_viewport()
        expect(page.locator(".log .role-badge.role-symptom").first).to_be_visible()
        shot(page, "03-job")
        job_url = page.url.split("#")[0]

        # statistics before the correction
        page.goto(server.url + "/ui/stats?range=all")
        oom_before, nccl_before = type_count(page, "OutOfMemoryError"), type_count(page, "NCCLTimeoutError")
        assert oom_before >= 2

        # correct the diagnosis: the statistics follow the label
        page.goto(job_url)
        page.get_by_label("Correct error type").select_option("NCCLTimeoutError")
        expect(page.locator("input[data-correct]")).to_be_checked()
        page.get_by_label("Note").fill("rank 2 OOM was a side effect; the fabric timed out first")
        page.get_by_role("button", name="Save label").click()
        expect(page.get_by_role("status").filter(has_text="Label saved")).to_be_visible()
        page.goto(server.url + "/ui/stats?range=all")
        assert type_count(page, "OutOfMemoryError") == oom_before - 1
        assert type_count(page, "NCCLTimeoutError") == nccl_before + 1
        expect(page.locator("#agreement")).to_have_text("0%")
        shot(page, "04-stats")

        # groups: the repeated failure, marked as being fixed
        page.goto(server.url + "/ui/groups")
        group = page.locator("table.groups tbody tr").filter(has_text="ECCError").first
        group.get_by_role("combobox").select_option("fixing")
        group.get_by_role("button", name="Save").click()
        expect(page.locator("table.groups tbody tr").filter(has_text="ECCError").first
               .get_by_role("combobox")).to_have_value("fixing")
        shot(page, "05-groups")

        # approve the proposed rule: it is active at once
        page.goto(server.url + "/ui/rules")
        proposal = page.locator("article.proposal").first
        proposal.get_by_label("Try on a log").fill("ok\nwandb: Network error (ConnectTimeout), entering retry loop.\n")
        proposal.get_by_role("button", name="Try").click()
        expect(page.locator(".tried")).to_contain_text("1 of 2 lines match")
        shot(page, "06-rules")
        page.locator("article.proposal").first.get_by_role("button", name="Approve").click()
        expect(page.get_by_role("status").filter(has_text="approved")).to_be_visible()
        rule_id = page.url.split("approved=")[1].split("#")[0]
        expect(page.locator(f"#r-{rule_id}")).to_be_visible()
        assert page.locator("article.proposal").count() == 0
        shot(page, "07-rules-approved")

        # a clear error page
        page.goto(server.url + "/ui/jobs/99999")
        expect(page.get_by_role("heading", name="404 · Not Found")).to_be_visible()
        shot(page, "08-error")

        # dark mode, the same pages
        dark = browser.new_context(viewport={"width": 1366, "height": 850}, color_scheme="dark",
                                   storage_state=context.storage_state())
        dark_page = dark.new_page()
        for name, path in [("09-dark-failures", "/ui/"), ("10-dark-job", job_url.replace(server.url, ""))]:
            dark_page.goto(server.url + path)
            shot(dark_page, name)
        dark.close()

        # sign out: the session is gone, even for a copied cookie
        cookies = context.cookies()
        page.goto(server.url + "/ui/")
        page.get_by_role("button", name="Sign out").click()
        expect(page.get_by_role("status").filter(has_text="You are signed out")).to_be_visible()
        page.goto(server.url + "/ui/stats")
        expect(page).to_have_url(server.url + "/ui/login?next=/ui/stats")
        replay = browser.new_context()
        replay.add_cookies(cookies)
        replay_page = replay.new_page()
        replay_page.goto(server.url + "/ui/")
        expect(replay_page.get_by_role("heading", name="Sign in")).to_be_visible()
        shot(replay_page, "11-signed-out")
        assert errors == [], f"script errors in the pages: {errors}"
        browser.close()

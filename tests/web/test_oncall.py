"""What an on-call engineer asks of the pages, in a real browser (Debian's chromium, playwright)
against a live `logdx serve`: the newest failure on top, pending diagnoses shown, one group for one
failure behind different line prefixes, merged and regressed groups, repeat-offender hosts that
name the faulty host, search and ranges in the stored raw log.

Each test uses its own cluster name, so the tests of this module share one server and read only
their own jobs. The server runs no diagnosis worker: a log above the inline size limit stays a
`pending` diagnosis, as it does while a busy worker has not reached it."""

from __future__ import annotations

import os
import re
import shutil
from datetime import UTC, datetime, timedelta
from pathlib import Path

import httpx
import pytest

from app.auth.models import TokenRole
from tests.service.live import REPO, LiveServer, free_port, issue_token

CHROMIUM = Path(os.environ.get("LOGDX_CHROMIUM", "/usr/bin/chromium"))
SHOTS = REPO / "artifacts" / "ui-oncall"
BROWSER_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-component-update"]
INLINE_LIMIT = 100_000  # bytes: larger logs are queued (and stay pending: no worker runs)

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
    data = tmp_path_factory.mktemp("oncall-data")
    rules = data / "rules"
    shutil.copytree(REPO / "rules", rules)
    env = {"LOGDX_DATA_DIR": str(data), "LOGDX_RULES_DIR": str(rules), "LOGDX_RUN_WORKER": "false",
           "LOGDX_SYNC_DIAGNOSE_MAX_BYTES": str(INLINE_LIMIT), "LOGDX_DIAGNOSIS_EXECUTOR": "thread"}
    live = LiveServer(env, port=free_port()).start(timeout=60)
    url = f"sqlite:///{data / 'logdx.db'}"
    live.db_url = url
    live.tokens = {role.value: issue_token(url, role, f"{role.value}-oncall") for role in TokenRole}
    yield live
    live.stop()


@pytest.fixture(scope="module")
def browser(server):
    with sync_playwright() as pw:
        chromium = pw.chromium.launch(executable_path=str(CHROMIUM), headless=True, args=BROWSER_ARGS)
        context = chromium.new_context(viewport={"width": 1366, "height": 850})
        page = context.new_page()
        page.goto(server.url + "/ui/login")
        page.get_by_label("API token").fill(server.tokens["admin"])
        page.get_by_role("button", name="Sign in").click()
        expect(page.get_by_role("heading", name="Failures")).to_be_visible()
        page.close()
        chromium.logdx_context = context
        yield chromium
        chromium.close()


@pytest.fixture
def page(browser):
    errors: list[str] = []
    tab = browser.logdx_context.new_page()
    tab.on("pageerror", lambda exc: errors.append(str(exc)))
    yield tab
    tab.close()
    assert errors == [], f"script errors in the pages: {errors}"


def shot(page, name: str) -> None:
    """Light at the page's width, dark, and a phone's 390 px, for a person to look at."""
    SHOTS.mkdir(parents=True, exist_ok=True)
    page.evaluate("window.scrollTo(0, 0)")
    page.screenshot(path=str(SHOTS / f"{name}-light.png"), full_page=True)
    page.emulate_media(color_scheme="dark")
    page.screenshot(path=str(SHOTS / f"{name}-dark.png"), full_page=True)
    page.emulate_media(color_scheme="light")
    size = page.viewport_size
    page.set_viewport_size({"width": 390, "height": 844})
    page.screenshot(path=str(SHOTS / f"{name}-390px.png"), full_page=True)
    page.set_viewport_size(size)


def ecc_log(prefix: str, *, steps: int = 30) -> bytes:
    lines = [f"{prefix}iteration {i}/ 1000 | lm loss: 2.{i % 10}E+00 |" for i in range(steps)]
    lines += [f"{prefix}RuntimeError: CUDA error: uncorrectable ECC error encountered",
              "torch.distributed.elastic.multiprocessing.errors.ChildFailedError:"]
    return ("\n".join(lines) + "\n").encode()


def user_bug_log() -> bytes:
    return (b"iteration 1/ 100 | lm loss: 2.0E+00 |\n"
            b"Traceback (most recent call last):\n  File \"train.py\", line 12, in <module>\n"
            b"    main()\nZeroDivisionError: division by zero\n")


def send(server: LiveServer, cluster: str, external_id: str, log: bytes, *, ended_hours_ago: float,
         hosts: list[str] | None = None, status: int = 200) -> dict:
    """What a Slurm epilog does: register the job, upload its log, ask for a diagnosis."""
    headers = {"Authorization": f"Bearer {server.tokens['scheduler']}"}
    ended = datetime.now(UTC) - timedelta(hours=ended_hours_ago)
    with httpx.Client(base_url=server.url, headers=headers, timeout=60) as http:
        job = http.post("/v1/jobs", json={
            "cluster": cluster, "external_id": external_id, "user": "oncall", "hosts": hosts or ["gpu-017"],
            "gpu_count": 8, "started_at": (ended - timedelta(hours=5)).isoformat(), "ended_at": ended.isoformat(),
            "state": "failed"})
        assert job.status_code in (200, 201), job.text
        job = job.json()
        assert http.put(f"/v1/jobs/{job['id']}/log", content=log).status_code == 201
        diagnosis = http.post(f"/v1/jobs/{job['id']}/diagnoses")
        assert diagnosis.status_code == status, diagnosis.text
        return {"job": job, **diagnosis.json()}


def rediagnose(server: LiveServer, job_id: int) -> None:
    headers = {"Authorization": f"Bearer {server.tokens['scheduler']}"}
    resp = httpx.post(f"{server.url}/v1/jobs/{job_id}/diagnoses", headers=headers, timeout=60)
    assert resp.status_code == 200, resp.text


def rows(page) -> list[str]:
    return page.locator("#failures tbody tr td:first-child a").all_inner_texts()


def test_failures_are_ordered_by_when_the_job_failed_and_pending_ones_show(server, page):
    old = send(server, "ord", "old", ecc_log("gpu-017: "), ended_hours_ago=72)
    send(server, "ord", "three-am", ecc_log("gpu-017: "), ended_hours_ago=1)
    send(server, "ord", "yesterday", ecc_log("gpu-017: "), ended_hours_ago=24)
    rediagnose(server, old["job"]["id"])  # a re-diagnosis of an old job does not make it new
    big = ecc_log("gpu-017: ", steps=4000)
    assert len(big) > INLINE_LIMIT
    send(server, "ord", "queued", big, ended_hours_ago=0.5, status=202)

    page.goto(server.url + "/ui/?cluster=ord")
    assert rows(page) == ["ord/queued", "ord/three-am", "ord/yesterday", "ord/old"]
    first = page.locator("#failures tbody tr").first
    expect(first).to_contain_text("pending")
    expect(page.locator("#failures thead")).to_contain_text("Failed")
    expect(page.locator("#failures caption")).to_contain_text("when the job failed")
    shot(page, "failures")


PREFIXES = ["[rank3]:[E1204 03:00:01.123456 4242 ProcessGroupNCCL.cpp:1] ",
            "2026-12-04 03:00:01,123 gpu-017 [rank 3] ",
            "gpu-017:4242:4301 [3] "]


def group_rows(page, cluster: str):
    page.goto(f"{page.url.split('/ui/')[0]}/ui/groups?cluster={cluster}")
    return page.locator("table.groups tbody tr")


def test_one_failure_is_one_group_merged_regressed_and_shown_on_the_job(server, page):
    for n, prefix in enumerate(PREFIXES):
        send(server, "grp", f"ecc-{n}", ecc_log(prefix), ended_hours_ago=10 - n)
    page.goto(server.url + "/ui/")
    groups = group_rows(page, "grp")
    expect(groups).to_have_count(1)  # one ECC error on one host by one rule, behind three prefixes
    expect(groups.first.locator("td.num").first).to_have_text("3")
    main_fp = groups.first.get_attribute("id").removeprefix("g-")

    # the same fault worded a little differently: its own group until an engineer merges it
    other = ecc_log("gpu-017: ").replace(b"encountered\n", b"encountered (page retirement pending)\n")
    send(server, "grp", "ecc-variant", other, ended_hours_ago=6)
    groups = group_rows(page, "grp")
    expect(groups).to_have_count(2)
    variant = groups.filter(has_not=page.locator(f"#g-{main_fp}")).filter(has_text="page retirement")
    variant.get_by_label("Merge into").fill(main_fp)
    variant.get_by_role("button", name="Merge").click()
    groups = page.locator("table.groups tbody tr")
    expect(groups).to_have_count(1)
    expect(groups.first.locator("td.num").first).to_have_text("4")
    expect(groups.first).to_contain_text("merged")

    # resolved, with an RMA ticket and an owner
    row = groups.first
    row.get_by_label(f"State of group {main_fp}").select_option("resolved")
    row.get_by_label(f"Note for group {main_fp}").fill("known: RMA of gpu-017 GPU 3")
    row.get_by_label(f"Ticket for group {main_fp}").fill("https://tickets.example/RMA-77")
    row.get_by_label(f"Assignee of group {main_fp}").fill("alice")
    row.get_by_role("button", name="Save").click()
    expect(page.locator(f"#g-{main_fp}")).to_contain_text("resolved")
    expect(page.locator(f"#g-{main_fp}")).not_to_contain_text("regressed")

    # ... and it happens again: regressed, in the list and on the job page
    again = send(server, "grp", "ecc-again", ecc_log("[default3]:"), ended_hours_ago=0)
    group = group_rows(page, "grp").first
    expect(group.locator(".group-state")).to_have_text("regressed")
    shot(page, "groups")
    page.goto(server.url + "/ui/?cluster=grp")
    expect(page.locator("#failures tbody tr").first.locator(".group-state")).to_have_text("regressed")
    expect(page.locator("#failures tbody tr").nth(1).locator(".group-state")).to_have_text("resolved")
    page.goto(f"{server.url}/ui/jobs/{again['job']['id']}")
    box = page.locator("#group")
    expect(box).to_contain_text("regressed")
    expect(box).to_contain_text("known: RMA of gpu-017 GPU 3")
    expect(box).to_contain_text("alice")
    expect(box.get_by_role("link", name="https://tickets.example/RMA-77")).to_have_attribute(
        "href", "https://tickets.example/RMA-77")
    # the other jobs of the group, newest first, the merged one's included; the group spans clusters
    # (the same ECC error of the first test's cluster is in it too)
    similar = page.locator("#similar li a")
    expect(similar).to_have_text(["ord/three-am", "grp/ecc-variant", "grp/ecc-2", "grp/ecc-1", "grp/ecc-0"])
    box.get_by_role("link", name="all 8 jobs of this group").click()
    assert rows(page)[0] == "grp/ecc-again" and len(rows(page)) == 8


def test_repeat_offender_hosts_are_the_hosts_infrastructure_failures_name(server, page):
    busy = ["gpu-busy1", "gpu-busy2"]
    for n in range(2):  # the faulty node, named by the ECC error in the log
        send(server, "hosts", f"ecc-{n}", ecc_log("gpu-bad: "), ended_hours_ago=5 + n, hosts=["gpu-bad", *busy])
    for n in range(4):  # user-code bugs on the busiest nodes: not the nodes' fault
        send(server, "hosts", f"bug-{n}", user_bug_log(), ended_hours_ago=1 + n, hosts=busy)
    page.goto(server.url + "/ui/stats?cluster=hosts&range=all")
    table = page.locator("#repeat-hosts tbody tr")
    expect(table).to_have_count(1)
    expect(table.first.locator("td").first).to_have_text("gpu-bad")
    expect(table.first).to_contain_text("ECCError ×2")
    expect(page.locator("#h-hosts ~ p.help, section[aria-labelledby=h-hosts] p.help").first).to_contain_text(
        "infrastructure")
    shot(page, "stats")


def test_node_view_shows_a_hosts_failures_drain_and_probes(server, page):
    from sqlalchemy import create_engine
    from sqlalchemy.orm import Session

    from app.actions.models import ControllerAction
    from app.controller.models import ProbeRun

    ecc = [send(server, "node", f"ecc-{n}", ecc_log("gpu-sick: "), ended_hours_ago=3 + n, hosts=["gpu-sick", "gpu-ok"])
           for n in range(2)]
    send(server, "node", "bug", user_bug_log(), ended_hours_ago=1, hosts=["gpu-sick", "gpu-ok"])
    job_id = ecc[0]["job"]["id"]
    engine = create_engine(server.db_url)
    with Session(engine) as session, session.begin():
        session.add(ControllerAction(job_id=job_id, kind="drain", params={"host": "gpu-sick",
                                     "reason": "ECC errors in two jobs"}, dry_run=False, status="done",
                                     actor="controller", result={}))
        session.add(ProbeRun(cluster="node", job_id=job_id, hosts=["gpu-sick", "gpu-ok"], verdict="faulty",
                             faulty=["gpu-sick"], slow=[], duration_s=12.0,
                             result={"healthy": ["gpu-ok"], "faulty": ["gpu-sick"]}))
    engine.dispose()

    page.goto(server.url + "/ui/stats?cluster=node&range=all")
    page.locator("#repeat-hosts").get_by_role("link", name="gpu-sick", exact=True).click()
    expect(page.get_by_role("heading", name="Host gpu-sick")).to_be_visible()
    by_type = page.locator("#host-by-type tbody tr")
    expect(by_type).to_have_count(1)  # the user-code failure on the same host does not count
    expect(by_type.first).to_contain_text("infrastructure")
    expect(by_type.first.locator("td.num")).to_have_text("2")
    expect(page.locator("#host-failures tbody tr")).to_have_count(2)
    expect(page.locator("#host-state")).to_contain_text("drained")
    expect(page.locator("#host-reason")).to_contain_text("ECC errors in two jobs")
    expect(page.locator("#host-state")).to_contain_text("UTC")
    expect(page.locator("#host-probes tbody tr").first.locator("td.verdict")).to_contain_text("faulty")
    shot(page, "host")
    # the job page links its suspects and its probe results to the node view
    page.goto(f"{server.url}/ui/jobs/{job_id}")
    expect(page.locator(f'a.host[href="/ui/hosts/gpu-sick"]').first).to_be_visible()
    expect(page.locator('.probe-hosts a.host[href="/ui/hosts/gpu-ok"]')).to_have_count(1)


def ranked_log() -> bytes:
    lines = [f"[rank{i % 4}]: iteration {i}/ 1000 | lm loss: 2.{i % 10}E+00 | lr 1e-4" for i in range(1, 61)]
    lines += ["[rank3]: RuntimeError: CUDA error: uncorrectable ECC error encountered",
              "torch.distributed.elastic.multiprocessing.errors.ChildFailedError:"]
    return ("\n".join(lines) + "\n").encode()


def test_search_and_read_the_stored_raw_log(server, page, browser):
    job = send(server, "logs", "search", ranked_log(), ended_hours_ago=2)
    job_id = job["job"]["id"]
    headers = {"Authorization": f"Bearer {server.tokens['engineer']}"}
    compressed = httpx.get(f"{server.url}/v1/diagnoses/{job['id']}/compressed", headers=headers).text
    assert "iteration 17/" not in compressed  # the compressed view dropped it

    page.goto(f"{server.url}/ui/jobs/{job_id}")
    form = page.locator("form#log-search")
    form.get_by_label("Search the raw log").fill("iteration 17/")
    form.get_by_role("button", name="Search").click()
    expect(page.locator("#match-count")).to_have_text("1 matching line")
    page.locator("#matches a").first.click()  # the raw lines around it, the match marked
    line = page.locator("#L17")
    expect(line).to_have_class(re.compile(r"\bmatch\b"))
    expect(line).to_contain_text("[rank1]: iteration 17/ 1000")
    expect(page.locator(".rawlines .rl")).to_have_count(57)  # 40 lines either side, clipped at line 1
    permalink = page.locator("#L17 a.no").get_attribute("href")
    assert permalink.endswith("around=17#L17") and "q=" not in permalink.split("around")[0].split("?")[0]
    shot(page, "log-range")

    # filter by rank; next/previous match
    page.goto(f"{server.url}/ui/jobs/{job_id}/log?q=iteration&rank=3")
    expect(page.locator("#match-count")).to_have_text("15 matching lines")
    page.locator("#matches a").first.click()
    expect(page.locator(".rl.current")).to_have_id("L3")
    page.get_by_role("link", name="Next match").click()
    expect(page.locator(".rl.current")).to_have_id("L7")
    page.get_by_role("link", name="Previous match").click()
    expect(page.locator(".rl.current")).to_have_id("L3")
    shot(page, "log-search")

    # the download has a file name a desktop opens, and the copy buttons copy
    page.goto(f"{server.url}/ui/jobs/{job_id}")
    download = page.request.get(server.url + page.locator("a#download-raw").get_attribute("href"))
    assert download.ok and download.headers["content-disposition"].endswith('.log"')
    browser.logdx_context.grant_permissions(["clipboard-read", "clipboard-write"], origin=server.url)
    page.get_by_role("button", name="Copy incident summary").click()
    summary = page.evaluate("navigator.clipboard.readText()")
    assert "logs/search" in summary and "ECCError" in summary and f"/ui/jobs/{job_id}" in summary
    page.locator("#evidence li").first.get_by_role("button", name="Copy", exact=True).click()
    assert page.evaluate("navigator.clipboard.readText()") == "[rank3]: RuntimeError: CUDA error: uncorrectable ECC error encountered"
    page.get_by_role("button", name="Copy link to line 61").click()
    assert page.evaluate("navigator.clipboard.readText()").endswith(f"/ui/jobs/{job_id}/log?around=61#L61")
    shot(page, "job")


def test_the_log_pages_work_without_javascript(server, browser):
    job = send(server, "logs", "nojs", ranked_log(), ended_hours_ago=3)
    context = browser.new_context(java_script_enabled=False, storage_state=browser.logdx_context.storage_state())
    page = context.new_page()
    page.goto(f"{server.url}/ui/jobs/{job['job']['id']}")
    expect(page.locator("textarea#incident-summary")).to_contain_text("ECCError")
    page.locator("form#log-search").get_by_label("Search the raw log").fill("ECC")
    page.locator("form#log-search").get_by_role("button", name="Search").click()
    expect(page.locator("#match-count")).to_have_text("1 matching line")
    context.close()


def megatron_log(steps: int = 300, spike: range = range(200, 230), nan_from: int = 290) -> bytes:
    lines = []
    for s in range(1, steps + 1):
        loss = f"{2.0 + 0.5 * 2.718 ** (-s / 100):.6E}"
        if s in spike:
            loss = "9.260000E+00"
        if s >= nan_from:
            loss = "nan"
        lines.append(f" iteration {s:8d}/  500000 | consumed samples: {s * 512:12d} | elapsed time per iteration (ms):"
                     f" 1234.5 | learning rate: 3.000E-04 | global batch size:   512 | lm loss: {loss} | loss scale:"
                     f" 65536.0 | grad norm: 1.234 | number of skipped iterations:   0 | number of nan iterations:   0 |")
    lines.append("RuntimeError: Loss is NaN")
    return ("\n".join(lines) + "\n").encode()


def test_charts_show_the_crash_by_step_with_values_and_zoom(server, page):
    job = send(server, "charts", "nan", megatron_log(), ended_hours_ago=1)
    page.goto(f"{server.url}/ui/jobs/{job['job']['id']}")
    loss = page.locator("#metrics figure").filter(has_text="loss").first.locator("svg")
    expect(loss).to_have_attribute("data-axis", "step")
    expect(loss.locator("text.axis-name")).to_have_text("training step")
    expect(loss.locator("text.axis").first).to_have_text("9.26")  # the spike's height, not a sample's
    expect(loss.locator("rect.nonfinite title")).to_contain_text("non-finite loss after step")
    titles = loss.locator("rect.hover title").all_text_contents()
    assert any(": loss 9.26" in t or "… 9.26" in t for t in titles), titles[:5]
    scale = page.locator("#metrics figure").filter(has_text="loss scale").locator("svg")
    label = scale.locator("text.axis").first
    expect(label).to_have_text("6.554e+04")
    assert label.bounding_box()["x"] >= scale.bounding_box()["x"]  # not clipped on the left
    shot(page, "job-charts")
    points_before = int(loss.get_attribute("aria-label").split(", ")[1].split()[0])
    page.get_by_role("link", name="around the failure").click()
    assert "zoom=" in page.url
    zoomed = page.locator("#metrics figure").filter(has_text="loss").first.locator("svg")
    assert int(zoomed.get_attribute("aria-label").split(", ")[1].split()[0]) < points_before
    # the brush: drag across the chart's middle
    box = zoomed.bounding_box()
    before = page.url
    page.mouse.move(box["x"] + box["width"] * 0.4, box["y"] + 40)
    page.mouse.down()
    page.mouse.move(box["x"] + box["width"] * 0.7, box["y"] + 40, steps=5)
    page.mouse.up()
    page.wait_for_url(lambda url: "zoom=" in url and url != before, timeout=10_000)
    expect(page.locator("#metrics .help .sub")).to_contain_text("showing step")


AXE = Path(__file__).parent / "vendor" / "axe-core" / "axe.min.js"


def contrast_failures(page) -> list[str]:
    page.add_script_tag(path=str(AXE))
    result = page.evaluate("""async () => {
        const r = await axe.run(document, {runOnly: {type: 'rule', values: ['color-contrast']}});
        return r.violations.flatMap(v => v.nodes.map(n => n.target.join(' ') + ': ' + n.failureSummary));
    }""")
    return result


def test_smaller_things_an_engineer_trips_over(server, page, browser):
    import csv
    import io
    import itertools

    letters = ["".join(p) for p in itertools.product("abcdefgh", repeat=2)][:52]
    for n, word in enumerate(letters):  # 52 different failures: more than a page of groups
        log = ("step 1\nTraceback (most recent call last):\n  File \"train.py\", line 3, in <module>\n"
               f"ValueError: unknown optimizer {word}{word[::-1]}\n").encode()
        send(server, "misc", f"v-{n}", log, ended_hours_ago=30 + n)
    label_job = send(server, "misc", "label-me", ecc_log("gpu-017: "), ended_hours_ago=2)

    # times say their zone
    page.goto(f"{server.url}/ui/jobs/{label_job['job']['id']}")
    expect(page.locator(".facts").filter(has_text="Ended")).to_contain_text("UTC")

    # after a correction the form shows the label chosen, not "Confirm" again
    page.get_by_label("Correct error type").select_option("NCCLTimeoutError")
    page.get_by_role("button", name="Save label").click()
    expect(page.get_by_role("status").filter(has_text="Label saved")).to_be_visible()
    expect(page.locator("input[data-correct]")).to_be_checked()
    expect(page.get_by_label("Correct error type")).to_have_value("NCCLTimeoutError")

    # CSV of the list, with the list's filters
    page.goto(server.url + "/ui/?cluster=misc")
    href = page.get_by_role("link", name="CSV").get_attribute("href")
    assert "cluster=misc" in href
    resp = page.request.get(server.url + href)
    assert resp.ok and resp.headers["content-type"].startswith("text/csv")
    table = list(csv.DictReader(io.StringIO(resp.text())))
    assert len(table) == 53 and table[0]["job"] == "misc/label-me" and table[0]["error_type"] == "NCCLTimeoutError"
    assert table[0]["failed_at_utc"].endswith("Z")

    # statistics: CSV, and links to the list keep the window and cluster
    page.goto(server.url + "/ui/stats?cluster=misc&range=7d")
    link = page.locator("#by-type a").filter(has_text="ValueError")
    href = link.get_attribute("href")
    assert "cluster=misc" in href and "range=7d" in href and "error_type=ValueError" in href
    resp = page.request.get(server.url + page.get_by_role("link", name="CSV").get_attribute("href"))
    rows_ = list(csv.DictReader(io.StringIO(resp.text())))
    assert {"table", "key", "failed_jobs", "gpu_hours"} <= set(rows_[0]) and any(r["key"] == "ValueError" for r in rows_)

    # the groups page is paginated
    page.goto(server.url + "/ui/groups?cluster=misc")
    expect(page.locator("table.groups tbody tr")).to_have_count(50)
    page.get_by_role("link", name="Next →").click()
    expect(page.locator("table.groups tbody tr")).to_have_count(3)
    assert "cluster=misc" in page.url

    # light-mode badges and text pass axe-core's colour-contrast rule on every page (a context that
    # lets the test's own script in: the pages' CSP allows only the package's script)
    checker = browser.new_context(bypass_csp=True, color_scheme="light",
                                  storage_state=browser.logdx_context.storage_state())
    page = checker.new_page()
    for path in ["/ui/?cluster=misc", "/ui/groups", f"/ui/jobs/{label_job['job']['id']}", "/ui/stats?range=all",
                 "/ui/rules", f"/ui/jobs/{label_job['job']['id']}/log?q=loss&around=5"]:
        page.goto(server.url + path)
        assert contrast_failures(page) == [], path
    checker.close()


def test_screenshots_of_the_other_pages(server, page, browser):
    for name, path in [("rules", "/ui/rules"), ("groups-all", "/ui/groups"), ("stats-all", "/ui/stats?range=all"),
                       ("error", "/ui/jobs/999999")]:
        page.goto(server.url + path)
        shot(page, name)
    anonymous = browser.new_context()
    login = anonymous.new_page()
    login.goto(server.url + "/ui/login")
    shot(login, "login")
    anonymous.close()

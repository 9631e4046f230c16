"""/docs and /redoc work on a closed network: every asset they load is served by logdx itself."""

from __future__ import annotations

import re
import shutil

import pytest

from tests.service.conftest import rules_copy
from tests.service.live import LiveServer


def _asset_urls(html: str) -> list[str]:
    return re.findall(r"""(?:src|href)\s*[=:]\s*["']([^"']+)["']""", html) + \
        re.findall(r"""url:\s*["']([^"']+)["']""", html)


@pytest.mark.parametrize("page", ["/docs", "/redoc"])
def test_docs_pages_load_nothing_from_other_hosts(client, page):
    resp = client.get(page)
    assert resp.status_code == 200
    urls = _asset_urls(resp.text)
    assert urls, resp.text
    external = [u for u in urls if re.match(r"(?:https?:)?//", u)]
    assert external == []
    for url in urls:
        if url.endswith((".js", ".css", ".png")):
            asset = client.get(url)
            assert asset.status_code == 200 and len(asset.content) > 1000, url
    assert client.get("/docs/assets/secrets.txt").status_code == 422  # only the known assets


def _browser():
    playwright = pytest.importorskip("playwright.sync_api")
    exe = shutil.which("chromium") or shutil.which("chromium-browser") or shutil.which("google-chrome")
    if exe is None:
        pytest.skip("no chromium to drive")
    return playwright, exe


@pytest.mark.slow
def test_swagger_ui_renders_with_the_outside_network_blocked(tmp_path):
    playwright, exe = _browser()
    server = LiveServer({"LOGDX_DATA_DIR": str(tmp_path / "data"),
                         "LOGDX_RULES_DIR": str(rules_copy(tmp_path / "rules")),
                         "LOGDX_DIAGNOSIS_EXECUTOR": "thread"}).start()
    blocked: list[str] = []
    try:
        with playwright.sync_playwright() as p:
            browser = p.chromium.launch(executable_path=exe, args=["--no-sandbox"])
            page = browser.new_page()

            def only_local(route):
                if route.request.url.startswith(server.url):
                    route.continue_()
                else:  # a closed cluster network: nothing else answers
                    blocked.append(route.request.url)
                    route.abort()

            page.route("**/*", only_local)
            page.goto(server.url + "/docs")
            page.wait_for_selector(".opblock", timeout=90_000)
            assert page.locator(".opblock").count() >= 15  # the operations are listed
            assert blocked == []  # Swagger UI asked for nothing outside
            page.goto(server.url + "/redoc")
            page.wait_for_selector("[data-section-id]", timeout=90_000)  # ReDoc rendered its sections
            browser.close()
    finally:
        server.kill()
    # ReDoc's own footer logo is the one outside request; the image hides itself when it fails
    assert set(blocked) <= {"https://cdn.redoc.ly/redoc/logo-mini.svg"}

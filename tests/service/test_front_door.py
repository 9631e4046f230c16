"""The front door: a browser opening the server's address lands on the UI's sign-in page; an
API client gets a small JSON index instead of a 404."""

from app import __version__


def test_a_browser_is_led_from_the_root_to_the_sign_in_page(client):
    accept = "text/html,application/xhtml+xml,application/xml;q=0.9,*/*;q=0.8"  # Chromium's
    first = client.get("/", headers={"Accept": accept}, follow_redirects=False)
    assert first.status_code == 303 and first.headers["location"] == "/ui/"
    page = client.get("/", headers={"Accept": accept})
    assert page.status_code == 200 and page.url.path == "/ui/login", page.url
    assert "<form" in page.text and "token" in page.text.lower()


def test_an_api_client_gets_the_index(client):
    for accept in ("application/json", "*/*", "text/html;q=0", ""):
        resp = client.get("/", headers={"Accept": accept}, follow_redirects=False)
        assert resp.status_code == 200, (accept, resp.status_code)
        body = resp.json()
        assert body["name"] == "logdx" and body["version"] == __version__
        for name, path in body["links"].items():
            assert client.get(path).status_code == 200, (name, path)


def test_the_front_door_is_not_part_of_the_api_schema(client):
    assert "/" not in client.get("/openapi.json").json()["paths"]

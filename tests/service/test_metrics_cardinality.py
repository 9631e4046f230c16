"""/metrics stays bounded whatever clients send: label values come from fixed sets."""

from __future__ import annotations

import asyncio
import random
import string
from http import HTTPStatus

from prometheus_client.parser import text_string_to_metric_families

from app.api.metrics import Metrics, MetricsMiddleware


def _series(text: str, name: str) -> set[tuple]:
    out = set()
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name == name:
                out.add(tuple(sorted(sample.labels.items())))
    return out


def _word(rng: random.Random, n: int = 8) -> str:
    return "".join(rng.choice(string.ascii_uppercase + string.digits) for _ in range(n))


def test_random_methods_and_paths_add_no_series(client):
    rng = random.Random(7)
    for _ in range(300):
        method = rng.choice([_word(rng), "GET", "POST", "PROPFIND", "get"])
        path = "/" + "/".join(_word(rng) for _ in range(rng.randint(1, 3)))
        client.request(method, path)
    series = _series(client.get("/metrics").text, "logdx_http_requests_total")
    methods = {dict(s)["method"] for s in series}
    assert methods <= {"GET", "POST", "PUT", "PATCH", "DELETE", "HEAD", "OPTIONS", "other"}
    assert {dict(s)["route"] for s in series} <= {"unmatched", "/metrics"}
    assert len(series) <= 20


def test_random_statuses_map_to_known_classes():
    metrics = Metrics()
    rng = random.Random(3)

    async def app(scope, receive, send):
        await send({"type": "http.response.start", "status": scope["status"], "headers": []})
        await send({"type": "http.response.body", "body": b""})

    middleware = MetricsMiddleware(app, metrics)

    async def noop(*_):
        return None

    async def drive():
        for _ in range(500):
            scope = {"type": "http", "method": _word(rng), "path": "/" + _word(rng),
                     "status": rng.randint(100, 999)}
            await middleware(scope, noop, noop)

    asyncio.run(drive())
    series = _series(metrics.render().decode(), "logdx_http_requests_total")
    statuses = {dict(s)["status"] for s in series}
    known = {str(int(code)) for code in HTTPStatus} | {"other"}
    assert statuses <= known
    assert len({dict(s)["method"] for s in series}) <= 8
    assert len(_series(metrics.render().decode(), "logdx_http_request_duration_seconds_count")) <= 8

"""Every metric docs/SERVICE.md documents moves when the service does the work it counts."""

from __future__ import annotations

import re
import time

from fastapi.testclient import TestClient
from prometheus_client.parser import text_string_to_metric_families

from app.api.app import create_app
from tests.service.conftest import REPO, HashEmbedder, make_settings, new_job, sample_log
from tests.service.test_llm_integration import ANSWER, UNMATCHED_LOG, _headers
from tests.llm.conftest import FakeOpenAIServer


def documented_metrics() -> list[tuple[str, dict[str, list[str]]]]:
    """(name, {label: [documented values]}) from the Metrics section of docs/SERVICE.md."""
    text = (REPO / "docs" / "SERVICE.md").read_text()
    section = text.split("## Metrics", 1)[1].split("\n## ", 1)[0]
    out = []
    for name, labels in re.findall(r"`(logdx_[a-z_]+)(?:\{([^}]*)\})?`", section):
        values = {}
        for spec in filter(None, (labels or "").split(",")):
            key, _, vals = spec.partition("=")
            if vals:
                values[key.strip()] = vals.split("|")
        out.append((name, values))
    return out


def _samples(text: str) -> list[tuple[str, dict[str, str], float]]:
    return [(s.name, s.labels, s.value) for fam in text_string_to_metric_families(text) for s in fam.samples]


def test_the_metrics_section_is_parsed():
    names = [n for n, _ in documented_metrics()]
    assert "logdx_diagnosis_duration_seconds" in names and len(names) >= 8
    assert dict(documented_metrics())["logdx_diagnosis_duration_seconds"] == {"mode": ["sync", "async", "one_shot"]}


def test_every_documented_metric_moves(tmp_path, service_pipeline):
    llm = FakeOpenAIServer()
    # rejected (too unsure to gate through), accepted, then a failing endpoint
    llm.script = [{"json": {**ANSWER, "confidence": 0.05}}, {"json": ANSWER}, {"status": 400}]
    settings = make_settings(tmp_path / "data", None, llm_backend="openai", llm_base_url=llm.base_url,
                             llm_model="fake-model", llm_max_retries=0, llm_timeout_s=5)
    app = create_app(settings, pipeline=service_pipeline, embedder=HashEmbedder())
    try:
        with TestClient(app, raise_server_exceptions=False) as client:
            h = _headers(app)["scheduler"]
            # sync diagnosis of an uploaded log; the LLM reviews an unexplained one
            unexplained = [UNMATCHED_LOG.replace(b"451", str(n).encode()) for n in (451, 452, 453)]
            for ext, log in (("sync", sample_log()), *((f"llm{i}", u) for i, u in enumerate(unexplained))):
                job = new_job(client, h, external_id=ext)["id"]
                assert client.put(f"/v1/jobs/{job}/log", content=log, headers=h).status_code == 201
                assert client.post(f"/v1/jobs/{job}/diagnoses", headers=h).status_code == 200
            # chunks, then a log over the sync limit: queued, diagnosed in the background
            job = new_job(client, h, external_id="async")["id"]
            big = sample_log(3000)
            assert len(big) > settings.sync_diagnose_max_bytes
            assert client.post(f"/v1/jobs/{job}/log/chunks", params={"offset": 0, "final": "true"},
                               content=big, headers=h).status_code == 200
            queued = client.post(f"/v1/jobs/{job}/diagnoses", headers=h)
            assert queued.status_code == 202, queued.text
            deadline = time.monotonic() + 60
            while client.get(queued.json()["href"], headers=h).json()["status"] != "done":
                assert time.monotonic() < deadline
                time.sleep(0.1)
            # one-shot
            assert client.post("/v1/diagnose", content=sample_log(), headers=h).status_code == 200
            samples = _samples(client.get("/metrics").text)
    finally:
        llm.close()

    missing = []
    for name, values in documented_metrics():
        moved = [labels for sname, labels, value in samples
                 if sname in (name, f"{name}_count") and value > 0]
        if not moved:
            missing.append(name)
        for key, wanted in values.items():
            for value in wanted:
                if not any(labels.get(key) == value for labels in moved):
                    missing.append(f"{name}{{{key}={value}}}")
    assert missing == []

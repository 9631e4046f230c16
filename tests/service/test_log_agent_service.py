"""The log agent through the service: a log in a metric format no filter rule knows is
diagnosed, the worker proposes a filter rule for review, an admin approves it through the API,
and the next diagnosis of the same log keeps over 100x fewer lines and every error line."""

from __future__ import annotations

import sys
import time
from pathlib import Path

from tests.service.conftest import new_job

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "bench"))
from gen_newformat import generate  # noqa: E402


def _diagnosed(client, sched, job: int) -> dict:
    """Request a diagnosis and wait for it (a log over the inline limit is queued: 202)."""
    resp = client.post(f"/v1/jobs/{job}/diagnoses", headers=sched)
    body = resp.json()
    deadline = time.monotonic() + 60
    while body.get("status") not in ("done", "failed") and time.monotonic() < deadline:
        time.sleep(0.1)
        body = client.get(f"/v1/diagnoses/{body['id']}", headers=sched).json()
    assert body["status"] == "done", body
    return body


def test_filter_rule_proposed_by_a_diagnosis_is_approved_and_used(client, sched, eng, admin, tmp_path):
    log = tmp_path / "newformat.log"
    truth = generate(log, steps=500, hosts=4)
    job = new_job(client, sched, external_id="newformat")["id"]
    assert client.put(f"/v1/jobs/{job}/log", content=log.read_bytes(), headers=sched).status_code == 201
    first = _diagnosed(client, sched, job)
    before = first["diagnosis"]["compression"]
    assert before["lines_kept"] == before["lines_in"] == truth["lines"]

    proposed = [p for p in client.get("/v1/rules/proposed", headers=eng).json()["items"]
                if p["kind"] == "filter" and p["proposed_by"] == "log-agent"]
    assert len(proposed) == 1 and proposed[0]["source_diagnosis_id"] == first["id"]
    assert proposed[0]["validation"]["valid"] and proposed[0]["rule"]["extract"]
    approved = client.post(f"/v1/rules/proposed/{proposed[0]['id']}/approve", headers=admin)
    assert approved.status_code == 200, approved.text

    second_row = _diagnosed(client, sched, job)
    second = second_row["diagnosis"]
    after = second["compression"]
    assert after["lines_in"] == before["lines_in"] and after["lines_kept"] * 100 <= before["lines_kept"]
    compressed = client.get(f"/v1/diagnoses/{second_row['id']}/compressed", headers=eng)
    assert compressed.status_code == 200
    assert all(line in compressed.text for line in truth["error_lines"][-1:])
    assert second["root_cause"]["error_type"] == "ECCError"
    assert second["last_progress"]["step"] == truth["last_step"]
    # nothing more to propose: the format is known now
    again = [p for p in client.get("/v1/rules/proposed", headers=eng).json()["items"] if p["kind"] == "filter"]
    assert len(again) == 1

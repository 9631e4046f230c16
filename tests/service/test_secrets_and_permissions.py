"""Secrets in a log never reach a diagnosis reader; the store is owner-only."""

from __future__ import annotations

import json
import stat
import subprocess
import sys

from tests.service.conftest import REPO, new_job

SECRET = "sk-live-4f9a8b7c6d5e4f3a2b1c"
LOG = (
    "[node-7] iteration 1/ 100 | lm loss: 2.0E+00 |\n"
    f"[rank3]: KeyError: 'api_key={SECRET}'\n"
    "[node-7] Traceback (most recent call last):\n"
    f"[rank3]: ValueError: bad credentials password={SECRET}\n"
).encode()


def _assert_clean(body) -> None:
    text = json.dumps(body)
    assert SECRET not in text and "sk-live" not in text
    assert "<SECRET>" in text


def test_one_shot_and_stored_diagnoses_hide_secrets(client, sched):
    one_shot = client.post("/v1/diagnose", content=LOG, headers=sched)
    assert one_shot.status_code == 200, one_shot.text
    _assert_clean(one_shot.json())
    assert "node-7" in json.dumps(one_shot.json()) or "3" in json.dumps(one_shot.json()["root_cause"])
    job = new_job(client, sched)["id"]
    assert client.put(f"/v1/jobs/{job}/log", content=LOG, headers=sched).status_code == 201
    stored = client.post(f"/v1/jobs/{job}/diagnoses", headers=sched)
    assert stored.status_code == 200
    _assert_clean(stored.json())
    _assert_clean(client.get(f"/v1/jobs/{job}/diagnoses", headers=sched).json())


def test_cli_json_hides_secrets(tmp_path):
    path = tmp_path / "job.log"
    path.write_bytes(LOG)
    out = subprocess.run([sys.executable, "-m", "app.cli", "diagnose", str(path), "--json"], cwd=REPO,
                         capture_output=True, text=True, timeout=120)
    assert out.stdout, out.stderr
    _assert_clean(json.loads(out.stdout))
    human = subprocess.run([sys.executable, "-m", "app.cli", "diagnose", str(path)], cwd=REPO,
                           capture_output=True, text=True, timeout=120)
    assert SECRET not in human.stdout + human.stderr


def test_database_and_blobs_are_owner_only(client, sched, settings):
    job = new_job(client, sched)["id"]
    resp = client.put(f"/v1/jobs/{job}/log", content=LOG, headers=sched)
    assert resp.status_code == 201
    job2 = new_job(client, sched, external_id="chunked")["id"]
    assert client.post(f"/v1/jobs/{job2}/log/chunks?offset=0", content=b"chunk\n", headers=sched).status_code < 300
    paths = [settings.data_dir / "logdx.db", *settings.blob_dir.rglob("*"), *settings.uploads_dir.rglob("*")]
    for path in paths:
        mode = stat.S_IMODE(path.stat().st_mode)
        if path.is_dir():
            assert mode & 0o077 == 0, f"{path} is {oct(mode)}"
        else:
            assert mode & 0o077 == 0, f"{path} is {oct(mode)}"
    for d in (settings.data_dir, settings.blob_dir, settings.spool_dir, settings.uploads_dir):
        assert stat.S_IMODE(d.stat().st_mode) == 0o700

"""The server's live-watch loop (LOGDX_CONTROLLER_LIVE_WATCH): a chunk-streamed log that stops
making progress is diagnosed (Hang) and recovered, while the job still runs."""

import sys
import time

import pytest
import yaml

from app.controller.recovery import RULES_FILE
from app.controller.schedulers.local import LocalScheduler
from tests.controller.logs import progress
from tests.controller.test_live_service import send
from tests.service.conftest import make_settings, new_job


@pytest.fixture
def settings(tmp_path, database_url):
    data = yaml.safe_load(RULES_FILE.read_text())
    data["defaults"]["stall"]["floor_s"] = 1.0
    rules = tmp_path / "recovery.yaml"
    rules.write_text(yaml.safe_dump(data))
    return make_settings(tmp_path / "data", database_url, controller_live_watch=True,
                         controller_live_interval_s=0.2, recovery_rules=rules, controller_local_nodes=["n1", "n2"])


def test_server_diagnoses_and_recovers_a_stalled_stream(app, client, sched, eng, settings, tmp_path):
    local = LocalScheduler(settings.data_dir / "local-scheduler", ["n1", "n2"])
    (tmp_path / "w").mkdir()
    ext = local.submit([sys.executable, "-c", "import time; time.sleep(60)"], workdir=tmp_path / "w", nodes=2)
    job = new_job(client, sched, external_id=ext, hosts=["n1", "n2"], state="running")["id"]
    offset = 0
    for i in range(1, 6):
        offset = send(client, sched, job, "\n".join(progress(i, i)) + "\n", offset)
        time.sleep(0.1)
    deadline = time.monotonic() + 60
    runs = []
    while time.monotonic() < deadline and not runs:
        time.sleep(0.3)
        runs = client.get(f"/v1/jobs/{job}/recoveries", headers=eng).json()["items"]
    assert runs, "no recovery after the stream stalled"
    assert runs[0]["error_type"] == "Hang" and runs[0]["action"] == "capture_and_restart"
    assert runs[0]["dry_run"] and runs[0]["idempotency_key"].startswith("dry-run:live:")
    kinds = [a["kind"] for a in client.get(f"/v1/jobs/{job}/actions", headers=eng).json()["items"]]
    assert kinds[0] == "alert" and "capture" in kinds

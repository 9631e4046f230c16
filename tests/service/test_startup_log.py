"""What start-up recovers (interrupted uploads, unfinished diagnoses) is said in the server log."""

from __future__ import annotations

from fastapi.testclient import TestClient

from app.api.app import create_app
from app.auth.models import TokenRole
from app.auth.service import create_token
from app.diagnoses.models import DiagnosisRow
from tests.service.conftest import make_settings, new_job, sample_log
from tests.service.live import LiveServer


def test_recovery_messages_reach_the_server_log(tmp_path, service_pipeline):
    data = tmp_path / "data"
    settings = make_settings(data, run_worker=False)
    app = create_app(settings, pipeline=service_pipeline)
    with TestClient(app) as client:
        token = app.state.services.db.run(create_token, role=TokenRole.SCHEDULER, name="t")[1]
        headers = {"Authorization": f"Bearer {token}"}
        job = new_job(client, headers)["id"]
        client.put(f"/v1/jobs/{job}/log", content=sample_log(3000), headers=headers)
        assert client.post(f"/v1/jobs/{job}/diagnoses", headers=headers).status_code == 202
    assert app.state.services.db.run(lambda session: session.query(DiagnosisRow).one().status) == "pending"
    (settings.spool_dir / "interrupted.tmp").write_bytes(b"half an upload")

    server = LiveServer({"LOGDX_DATA_DIR": str(data), "LOGDX_RULES_DIR": str(settings.rules_dir),
                         "LOGDX_DIAGNOSIS_EXECUTOR": "thread"})
    server.start(log_level="info")
    try:
        pass
    finally:
        server.stop()
    text = server.log_path.read_text()
    assert "removed 1 spool files of interrupted uploads" in text
    assert "re-queueing 1 unfinished diagnoses" in text

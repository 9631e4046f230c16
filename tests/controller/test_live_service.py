"""Live watching of logs streamed to the service in chunks (real app, real part files)."""

from app.controller.live import LiveMonitor
from tests.service.conftest import new_job


def nano(i, ms, rank):
    return f"[rank{rank}]: iter {i}: loss 3.2145, time {ms:.2f}ms, mfu 45.67%"


def send(client, headers, job, text, offset):
    data = text.encode()
    resp = client.post(f"/v1/jobs/{job}/log/chunks", params={"offset": offset}, content=data, headers=headers)
    assert resp.status_code == 200, resp.text
    return offset + len(data)


def test_monitor_alerts_on_stragglers_and_a_stall(app, client, sched, eng):
    job = new_job(client, sched, external_id="live-1", state="running")["id"]
    services = app.state.services
    now = [0.0]
    monitor = LiveMonitor(db=services.db, store=services.store, ruleset=services.pipeline.ruleset,
                          factor=5, floor_s=10, straggler_factor=2, clock=lambda: now[0])
    offset = 0
    for i in range(5):
        lines = [nano(i, 900 if r == 3 else 300, r) for r in range(4)]
        offset = send(client, sched, job, "\n".join(lines) + "\n", offset)
        now[0] = float(i)
        alerts = monitor.scan()
        if i == 2:
            assert [a.kind for _, _, a in alerts] == ["straggler"]
    now[0] = 4 + 9
    assert monitor.scan() == []
    now[0] = 4 + 11
    (_, job_id, stall), = monitor.scan()
    assert job_id == job and stall.kind == "stall" and stall.details["last_step"] == 4
    alerts = [a for a in client.get(f"/v1/jobs/{job}/actions", headers=eng).json()["items"] if a["kind"] == "alert"]
    assert [a["params"]["alert"] for a in alerts] == ["straggler", "stall"]
    assert "rank 3" in alerts[0]["params"]["message"]
    # a sealed log is no longer watched
    send_final = client.post(f"/v1/jobs/{job}/log/chunks", params={"offset": offset, "final": "true"}, content=b"",
                             headers=sched)
    assert send_final.status_code == 200, send_final.text
    monitor.scan()
    assert monitor.tails == {}

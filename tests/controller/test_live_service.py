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


def test_an_attempt_that_ended_is_not_watched_and_a_stall_is_diagnosed_on_its_own_attempt(app, client, sched):
    """The shipper of attempt 1 never sealed its chunked log; the epilog uploaded the whole log and
    attempt 2 streams now. Attempt 1's silence is not a stall; attempt 2's stall is diagnosed on
    attempt 2's log."""
    import anyio

    from app.controller.live import act_on_stall
    from app.diagnoses.models import DiagnosisRow

    job = new_job(client, sched, external_id="live-2", state="running")["id"]
    services = app.state.services
    now = [0.0]
    monitor = LiveMonitor(db=services.db, store=services.store, ruleset=services.pipeline.ruleset,
                          factor=5, floor_s=10, straggler_factor=2, startup_s=30, clock=lambda: now[0])
    first = "".join(nano(i, 300, 0) + "\n" for i in range(5))
    send(client, sched, job, first, 0)
    assert len(monitor.scan()) == 0 and len(monitor.tails) == 1
    # the attempt ends: its whole log uploaded, then attempt 2 registers and streams
    assert client.put(f"/v1/jobs/{job}/log", params={"attempt": 1}, content=first.encode(),
                      headers=sched).status_code == 201
    now[0] = 20.0
    assert monitor.scan() == [] and monitor.tails == {}  # attempt 1 no longer watched: no stall
    client.post("/v1/jobs", json={"cluster": "c1", "external_id": "live-2", "attempt": 2, "state": "running"},
                headers=sched)
    second = "".join(nano(i, 300, 0) + "\n" for i in range(3, 8))
    resp = client.post(f"/v1/jobs/{job}/log/chunks", params={"offset": 0, "attempt": 2}, content=second.encode(),
                       headers=sched)
    assert resp.status_code == 200, resp.text
    assert monitor.scan() == []
    now[0] = 20.0 + 11
    (log_id, job_id, stall), = monitor.scan()
    assert stall.kind == "stall" and stall.details["last_step"] == 7

    class Worker:
        async def execute(self, diagnosis_id, mode):  # noqa: ANN001
            self.diagnosis_id = diagnosis_id

    class Controller:
        def recover(self, **kw):  # noqa: ANN003
            self.kw = kw

    worker, ctl = Worker(), Controller()
    anyio.run(lambda: act_on_stall(db=services.db, worker=worker, controller=ctl, log_id=log_id, job_id=job_id,
                                   stall_no=1))
    from app.jobs.models import Attempt

    with services.db.transaction() as session:
        row = session.get(DiagnosisRow, worker.diagnosis_id)
        assert row.job_log_id == log_id and session.get(Attempt, row.attempt_id).number == 2
    assert ctl.kw["diagnosis_id"] == worker.diagnosis_id and ctl.kw["idempotency_key"] == f"live:{log_id}:stall:1"

"""Fingerprints stored with diagnoses make failure groups a query; label agreement; the
migration that adds them fills in diagnoses made before it."""

from __future__ import annotations

from alembic import command
from sqlalchemy import select, update

from app.core.fingerprint import fingerprint
from app.core.types import Diagnosis
from app.db.migrate import alembic_config
from app.diagnoses.models import DiagnosisRow
from app.failures import service as failures
from app.failures.models import GroupState
from app.labels.service import label_agreement
from tests.service.conftest import new_job, sample_log


def _diagnose(client, sched, external_id, log, **fields) -> dict:
    job = new_job(client, sched, external_id, **fields)
    client.put(f"/v1/jobs/{job['id']}/log", content=log, headers=sched)
    return client.post(f"/v1/jobs/{job['id']}/diagnoses", headers=sched).json()


def test_each_diagnosis_stores_its_fingerprint_rule_and_metric_series(app, client, sched):
    out = _diagnose(client, sched, "1", sample_log())
    with app.state.services.db.transaction() as session:
        row = session.get(DiagnosisRow, out["id"])
        assert row.fingerprint == fingerprint(Diagnosis.from_json_dict(out["diagnosis"]))
        assert row.rule_id == out["diagnosis"]["root_cause"]["rule_id"]
        from app.logs.models import CompressedLog

        series = session.get(CompressedLog, row.compressed_log_id).metrics
    assert len(series) == 40 and all("loss" in p["values"] for p in series)


def test_groups_span_jobs_hosts_and_clusters(app, client, sched):
    _diagnose(client, sched, "1", sample_log(host="node-1"), hosts=["node-1"], cluster="alpha")
    _diagnose(client, sched, "2", sample_log(host="node-2"), hosts=["node-2"], cluster="beta")
    _diagnose(client, sched, "3", b"step 1\nTraceback\nKeyError: 'x'\n", hosts=["node-3"])
    db = app.state.services.db
    with db.transaction() as session:
        groups = failures.list_groups(session=session)
        assert len(groups) == 2
        big = groups[0]
        assert (big.jobs, big.hosts, big.clusters) == (2, {"node-1", "node-2"}, {"alpha", "beta"})
        assert big.gpu_hours == 2 * 16 * 10  # two 10-hour jobs on 16 GPUs
        assert big.error_type == "ECCError" and big.rule_id
        failures.set_group_state(session=session, fingerprint=big.fingerprint, state=GroupState.KNOWN,
                                 note=None, updated_by="alice")
    with db.transaction() as session:
        assert [g.jobs for g in failures.list_groups(session=session, state="known")] == [2]
        assert failures.list_groups(session=session, cluster="beta")[0].jobs == 1


def test_agreement_counts_the_newest_label_per_diagnosis(app, client, sched, eng):
    a = _diagnose(client, sched, "1", sample_log())
    b = _diagnose(client, sched, "2", sample_log())
    client.post(f"/v1/diagnoses/{a['id']}/labels", json={"verdict": "confirm"}, headers=eng)
    client.post(f"/v1/diagnoses/{b['id']}/labels", json={"verdict": "confirm"}, headers=eng)
    client.post(f"/v1/diagnoses/{b['id']}/labels", json={"verdict": "correct", "error_type": "NVLinkError"},
                headers=eng)
    with app.state.services.db.transaction() as session:
        agreement = label_agreement(session=session)
    assert (agreement.labelled, agreement.agreed, agreement.rate) == (2, 1, 0.5)
    assert agreement.by_decider == {"rules": (2, 1)}
    with app.state.services.db.transaction() as session:
        group = failures.list_groups(session=session)[0]
    assert group.explained_by == f"rule {group.rule_id} · labelled ECCError (1 of 2) · labelled NVLinkError (1 of 2)"


def test_migration_fills_in_fingerprints_of_earlier_diagnoses(app, client, sched, settings):
    out = _diagnose(client, sched, "1", sample_log())
    db = app.state.services.db
    with db.transaction() as session:
        session.execute(update(DiagnosisRow).values(fingerprint=None, rule_id=None))
    cfg = alembic_config(settings.effective_database_url)
    command.downgrade(cfg, "0002")
    command.upgrade(cfg, "head")
    with db.transaction() as session:
        fp, rule = session.execute(select(DiagnosisRow.fingerprint, DiagnosisRow.rule_id)).one()
    assert fp == fingerprint(Diagnosis.from_json_dict(out["diagnosis"]))
    assert rule == out["diagnosis"]["root_cause"]["rule_id"]


def test_groups_over_the_api(client, sched, eng):
    _diagnose(client, sched, "1", sample_log(host="node-1"), hosts=["node-1"])
    _diagnose(client, sched, "2", sample_log(host="node-2"), hosts=["node-2"])
    groups = client.get("/v1/failure-groups", headers=eng).json()["items"]
    assert [(g["jobs"], g["hosts"], g["state"]) for g in groups] == [(2, ["node-1", "node-2"], "new")]
    fp = groups[0]["fingerprint"]
    resp = client.put(f"/v1/failure-groups/{fp}", json={"state": "known", "note": "INFRA-7"}, headers=eng)
    assert resp.status_code == 200 and (resp.json()["state"], resp.json()["note"]) == ("known", "INFRA-7")
    assert client.get("/v1/failure-groups?state=new", headers=eng).json()["items"] == []
    missing = client.put(f"/v1/failure-groups/{'0' * 16}", json={"state": "known"}, headers=eng)
    assert missing.status_code == 404 and missing.json()["error"]["detail"] == {"fingerprint": "0" * 16}
    assert client.put("/v1/failure-groups/XYZ", json={"state": "known"}, headers=eng).status_code == 422
    assert client.put(f"/v1/failure-groups/{fp}", json={"state": "gone"}, headers=eng).status_code == 422
    assert client.get("/v1/failure-groups", headers=sched).status_code == 403


def test_merge_regression_and_triage_fields_over_the_api(client, sched, eng):
    _diagnose(client, sched, "1", sample_log(host="node-1"), hosts=["node-1"])
    variant = sample_log(host="node-1").replace(b"encountered\n", b"encountered on page 7\n")
    _diagnose(client, sched, "2", variant, hosts=["node-1"])
    groups = client.get("/v1/failure-groups", headers=eng).json()["items"]
    assert len(groups) == 2
    a, b = sorted(g["fingerprint"] for g in groups)
    merged = client.post(f"/v1/failure-groups/{b}/merge", json={"into": a}, headers=eng)
    assert merged.status_code == 200, merged.text
    assert (merged.json()["fingerprint"], merged.json()["jobs"], merged.json()["merged"]) == (a, 2, [b])
    assert client.post(f"/v1/failure-groups/{a}/merge", json={"into": b}, headers=eng).status_code == 422
    # a decision about the merged group is a decision about the group it is part of
    resp = client.put(f"/v1/failure-groups/{b}", json={"state": "resolved", "assignee": "alice",
                                                        "ticket": "https://tickets.example/RMA-7"}, headers=eng)
    assert resp.status_code == 200 and resp.json()["fingerprint"] == a
    assert (resp.json()["assignee"], resp.json()["ticket"], resp.json()["regressed"]) == (
        "alice", "https://tickets.example/RMA-7", False)
    bad = client.put(f"/v1/failure-groups/{a}", json={"state": "known", "ticket": "javascript:alert(1)"}, headers=eng)
    assert bad.status_code == 422
    # fails again after it was resolved
    _diagnose(client, sched, "3", sample_log(host="node-1"), hosts=["node-1"],
              started_at="2999-01-01T00:00:00Z", ended_at="2999-01-01T01:00:00Z")
    regressed = client.get("/v1/failure-groups?state=regressed", headers=eng).json()["items"]
    assert [(g["fingerprint"], g["jobs"], g["regressed"]) for g in regressed] == [(a, 3, True)]
    assert client.delete(f"/v1/failure-groups/{b}/merge", headers=eng).status_code == 204
    assert len(client.get("/v1/failure-groups", headers=eng).json()["items"]) == 2


def test_migration_regroups_failures_behind_different_line_prefixes(app, client, sched, settings):
    """Fingerprints stored before prefixes were ignored are recomputed; decisions follow them."""
    one = _diagnose(client, sched, "1", sample_log(host="node-1"), hosts=["node-1"])
    two = _diagnose(client, sched, "2", sample_log(host="node-1").replace(b"node-1: Runtime", b"[rank3]:[E1204 "
                                                                           b"03:00:01.1 4242 x.cpp:1] Runtime"))
    db = app.state.services.db
    with db.transaction() as session:  # as an older logdx stored them: two groups, one decided
        session.execute(update(DiagnosisRow).where(DiagnosisRow.id == one["id"]).values(fingerprint="a" * 16))
        session.execute(update(DiagnosisRow).where(DiagnosisRow.id == two["id"]).values(fingerprint="b" * 16))
        failures.set_group_state(session=session, fingerprint="b" * 16, state=GroupState.KNOWN, note="RMA",
                                 updated_by="alice")
    cfg = alembic_config(settings.effective_database_url)
    command.downgrade(cfg, "0006_token_clusters")
    command.upgrade(cfg, "head")
    with db.transaction() as session:
        groups = failures.list_groups(session=session)
    assert [(g.jobs, g.state, g.note) for g in groups] == [(2, "known", "RMA")]

"""The whole batch flow through the real CLI: import an archive (realworld logs with their human
labels, generated logs, broken files), change a rule, re-label the stored jobs, SIGKILL the run
in the middle, resume it, and check the diff report, the preserved human labels and that every
log got exactly one new diagnosis. Runs on SQLite (local process pool) and, when configured, on
PostgreSQL (procrastinate worker inside the command)."""

from __future__ import annotations

import csv
import io
import json

import pytest
from sqlalchemy import func, select

from app.db.engine import Database
from app.diagnoses.models import DiagnosisRow
from app.jobs.models import Job
from app.labels.models import Label
from app.relabel.models import ItemStatus, RelabelItem, RelabelRun
from tests.relabel.conftest import (
    REALWORLD,
    REMOVED_RULE,
    cli_env,
    kill_group,
    make_archive,
    rules_without,
    run_cli,
    start_cli,
    wait_for,
)
from tests.service.conftest import DB_PARAMS, reset_postgres

pytestmark = pytest.mark.slow


@pytest.fixture(params=DB_PARAMS)
def database_url(request, tmp_path) -> str:
    if request.param == "postgres":
        from tests.service.conftest import PG_URL

        reset_postgres(PG_URL)
        return PG_URL
    return f"sqlite:///{tmp_path / 'data' / 'logdx.db'}"


def _csv(path) -> list[dict[str, str]]:  # noqa: ANN001
    return list(csv.DictReader(io.StringIO(path.read_text(encoding="utf-8"))))


def _golden_agreement() -> int:
    """Realworld cases whose golden diagnosis (expected.json) has the human label's root cause."""
    return sum(json.loads((c / "expected.json").read_text())["root_cause"]["error_type"]
               == json.loads((c / "label.json").read_text())["root_cause"]
               for c in REALWORLD.iterdir() if c.is_dir())


def test_import_then_relabel_after_rule_change_with_kill_and_resume(tmp_path, database_url):
    archive = tmp_path / "archive"
    counts = make_archive(archive)
    total = sum(counts.values())
    env = cli_env(tmp_path / "data", database_url, LOGDX_RELABEL_HEARTBEAT_S="0.5",
                  LOGDX_RELABEL_STALLED_AFTER_S="2")

    # 1. import and label the archive
    done = run_cli(["relabel", "--archive", str(archive), "--cluster", "old-logs", "--workers", "2", "--quiet",
                    "--json", str(tmp_path / "import.json"), "--csv", str(tmp_path / "import.csv")], env)
    assert done.returncode == 0, done.stderr + done.stdout
    imported = json.loads((tmp_path / "import.json").read_text())
    assert imported["logs"] == total and imported["failed"] == 1 and imported["new"] == total - 1
    assert imported["changed"] == 0
    (failed,) = imported["failed_logs"]
    assert failed["key"].endswith("corrupt.log.gz") and "corrupt" in failed["error"]
    human = imported["human"]
    # the sidecar labels: the batch agrees with them exactly where the pipeline's golden answer does
    assert human["labelled"] == counts["realworld"]
    assert human["agree_after"] == _golden_agreement()
    rows = _csv(tmp_path / "import.csv")
    ecc_keys = {r["key"] for r in rows if r["new_rule_id"] == REMOVED_RULE}
    assert len(ecc_keys) >= counts["generated"] + 1  # every generated log and the realworld ECC case
    assert any(r["key"].endswith("truncated.log.zst") and r["status"] == "done" for r in rows)

    db = Database(database_url)
    try:
        stored = total - 1
        assert db.run(lambda session: session.scalar(select(func.count(Job.id)))) == stored
        labels_before = db.run(lambda session: [(lb.id, lb.diagnosis_id, lb.verdict, lb.error_type)
                                                for lb in session.scalars(select(Label).order_by(Label.id))])
        assert len(labels_before) == counts["realworld"]
        diagnoses_before = db.run(lambda session: session.scalar(select(func.count(DiagnosisRow.id))))

        # 2. the rule change, re-labeled by a run that is killed in the middle
        new_rules = rules_without(tmp_path / "rules-new")
        proc = start_cli(["relabel", "--rules", str(new_rules), "--workers", "1", "--batch-size", "2",
                          "--quiet"], env, tmp_path / "killed.log")
        try:
            def finished_items() -> int:
                return db.run(lambda session: session.scalar(select(func.count(RelabelItem.id)).where(
                    RelabelItem.run_id == 2, RelabelItem.status == ItemStatus.DONE.value)))

            wait_for(lambda: finished_items() >= 6, 180, "the second run to get going")
        finally:
            kill_group(proc)
        left = db.run(lambda session: session.scalar(select(func.count(RelabelItem.id)).where(
            RelabelItem.run_id == 2, RelabelItem.status.in_(("pending", "running")))))
        assert 0 < left < stored, "the kill should land in the middle of the run"

        # 3. resume: the rest is done, nothing twice
        done = run_cli(["relabel", "--resume", "2", "--workers", "2", "--quiet", "--json",
                        str(tmp_path / "relabel.json"), "--csv", str(tmp_path / "relabel.csv")], env)
        assert done.returncode == 0, done.stderr + done.stdout
        items = db.run(lambda session: list(session.scalars(select(RelabelItem).where(RelabelItem.run_id == 2))))
        assert len(items) == stored and {i.status for i in items} == {ItemStatus.DONE.value}
        new_ids = [i.new_diagnosis_id for i in items]
        assert len(set(new_ids)) == stored and None not in new_ids
        per_job = db.run(lambda session: dict(session.execute(
            select(DiagnosisRow.job_id, func.count(DiagnosisRow.id)).group_by(DiagnosisRow.job_id)).all()))
        assert set(per_job.values()) == {2}, "each job: its import diagnosis and exactly one re-label"
        assert db.run(lambda session: session.scalar(select(func.count(DiagnosisRow.id)))) == diagnoses_before + stored
        assert db.run(lambda session: session.get(RelabelRun, 2).status) == "done"

        # 4. the diff report
        report = json.loads((tmp_path / "relabel.json").read_text())
        assert report["logs"] == stored and report["done"] == stored and report["failed"] == 0
        assert report["changed"] == len(ecc_keys) and report["unchanged"] == stored - len(ecc_keys)
        assert "ECCError" not in report["transitions"]["ECCError"]
        assert sum(report["transitions"]["ECCError"].values()) == len(ecc_keys)
        lost = {r["rule_id"]: r["lost"] for r in report["by_rule"]}
        assert lost[REMOVED_RULE] == len(ecc_keys)
        assert [v["changed"] for v in report["by_rules_version"]] == [len(ecc_keys)]
        assert {c["key"] for c in report["changed_logs"]} == ecc_keys
        for change in report["changed_logs"]:
            new_id = int(change["links"]["new_diagnosis"].rsplit("/", 1)[1])
            row = db.run(lambda session, i=new_id: session.get(DiagnosisRow, i))
            assert row.error_type == change["new_error_type"] != "ECCError"
            assert change["links"]["job"] == f"/v1/jobs/{row.job_id}"
        h = report["human"]
        (regression,) = h["regressions"]
        assert regression["key"].startswith("old-logs/realworld/002-ecc") and regression["human_error_type"] == "ECCError"
        assert h["agree_before"] - h["agree_after"] == 1
        table = _csv(tmp_path / "relabel.csv")
        assert len(table) == stored and sum(int(r["changed"]) for r in table) == len(ecc_keys)

        # 5. human labels untouched; a labelled job keeps its label as effective root cause
        labels_after = db.run(lambda session: [(lb.id, lb.diagnosis_id, lb.verdict, lb.error_type)
                                               for lb in session.scalars(select(Label).order_by(Label.id))])
        assert labels_after == labels_before
        job = db.run(lambda session: session.get(Job, regression["job_id"]))
        newest = db.run(lambda session: session.get(DiagnosisRow, job.diagnosis_id))
        assert newest.error_type != "ECCError" and job.error_type == "ECCError"

        # 6. dry run back to the shipped rules: the reverse diff, nothing written
        done = run_cli(["relabel", "--dry-run", "--only-stale", "--workers", "2", "--quiet", "--json",
                        str(tmp_path / "dry.json")], env)
        assert done.returncode == 0, done.stderr + done.stdout
        dry = json.loads((tmp_path / "dry.json").read_text())
        assert dry["logs"] == stored and dry["changed"] == len(ecc_keys)
        assert sum(row.get("ECCError", 0) for row in dry["transitions"].values()) == len(ecc_keys)
        assert len(dry["human"]["fixed"]) == 1 and dry["human"]["regressions"] == []
        assert db.run(lambda session: session.scalar(select(func.count(DiagnosisRow.id)))) == diagnoses_before + stored
    finally:
        db.dispose()

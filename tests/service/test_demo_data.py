"""`logdx demo-data` loads the bundled example logs as diagnosed jobs, once."""

from __future__ import annotations

from click.testing import CliRunner

from app.cli import cli
from app.db.engine import Database
from app.failures import service as failures
from app.jobs.models import Job
from app.rules_review.models import ProposedRule


def test_demo_data_loads_every_bundled_log_once(tmp_path, monkeypatch):
    monkeypatch.setenv("LOGDX_DATA_DIR", str(tmp_path / "data"))
    first = CliRunner().invoke(cli, ["demo-data"])
    assert first.exit_code == 0, first.output
    assert "loaded 28 demo jobs (0 already there), 1 example rule proposal" in first.output
    second = CliRunner().invoke(cli, ["demo-data"])
    assert "loaded 0 demo jobs (28 already there), 0 example rule proposal" in second.output
    db = Database(f"sqlite:///{tmp_path / 'data' / 'logdx.db'}")
    with db.transaction() as session:
        jobs = session.query(Job).all()
        assert len(jobs) == 28 and all(j.external_id.startswith("demo-") and j.error_type for j in jobs)
        oom = next(j for j in jobs if "010-oom" in j.external_id)
        assert oom.error_type == "OutOfMemoryError"
        groups = failures.list_groups(session=session)
        assert max(g.jobs for g in groups) >= 3  # the sample job failing on node-07 again and again
        assert session.query(ProposedRule).count() == 1
    db.dispose()


def test_demo_data_says_when_there_are_no_logs(tmp_path, monkeypatch):
    monkeypatch.setenv("LOGDX_DATA_DIR", str(tmp_path / "data"))
    (tmp_path / "empty").mkdir()
    result = CliRunner().invoke(cli, ["demo-data", "--logs", str(tmp_path / "empty")])
    assert result.exit_code == 2 and "no example logs under" in result.output

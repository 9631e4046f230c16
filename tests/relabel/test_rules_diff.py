"""`logdx rules diff OLD NEW --logs DIR`: what a rule change would do, before it is approved."""

from __future__ import annotations

import io
import json
import shutil

from click.testing import CliRunner

from app.cli import cli
from app.relabel.progress import ProgressView
from tests.relabel.conftest import REALWORLD, REMOVED_RULE, SHIPPED_RULES, rules_without


def test_rules_diff_reports_what_removing_a_rule_changes(tmp_path):
    logs = tmp_path / "logs"
    shutil.copytree(REALWORLD, logs)
    (logs / "zz-broken.log.gz").write_bytes(b"\x1f\x8b\x08\x00" + b"\xff" * 64)
    new = rules_without(tmp_path / "new")
    result = CliRunner().invoke(cli, ["rules", "diff", str(SHIPPED_RULES), str(new), "--logs", str(logs),
                                      "--workers", "2", "--json", str(tmp_path / "d.json"),
                                      "--csv", str(tmp_path / "d.csv"), "--quiet"])
    assert result.exit_code == 0, result.output
    report = json.loads((tmp_path / "d.json").read_text())
    n = sum(1 for p in REALWORLD.iterdir() if p.is_dir())
    assert (report["logs"], report["done"], report["failed"], report["new"]) == (n + 1, n, 1, 0)
    (changed,) = report["changed_logs"]
    assert changed["key"].startswith("002-ecc") and changed["old_rule_id"] == REMOVED_RULE
    assert changed["old_error_type"] == "ECCError" != changed["new_error_type"]
    assert [c["key"] for c in report["human"]["regressions"]] == [changed["key"]]
    assert report["failed_logs"][0]["key"] == "zz-broken.log.gz"
    assert "regression" in result.output and "ECCError" in result.output
    assert len((tmp_path / "d.csv").read_text().splitlines()) == n + 2


def test_rules_diff_refuses_a_broken_library(tmp_path):
    bad = rules_without(tmp_path / "bad")
    (bad / "broken.yaml").write_text("kind: diagnosis\nfamily: broken\nrules:\n  - id: x\n    error_type: Nope\n"
                                     "    pattern: 'x'\n", encoding="utf-8")
    result = CliRunner().invoke(cli, ["rules", "diff", str(SHIPPED_RULES), str(bad), "--logs", str(REALWORLD),
                                      "--workers", "1", "--quiet"])
    assert result.exit_code == 2 and "bad rules" in result.output


def test_progress_lines_without_a_terminal():
    out = io.StringIO()
    view = ProgressView(files=10, total_bytes=50_000_000, stream=out, tty=False, every_s=0)
    view.update(0, 0)
    view.update(4, 20_000_000)
    view.close()
    lines = out.getvalue().splitlines()
    assert len(lines) == 3
    assert lines[1].startswith("relabel: 4/10 files, 20.0/50.0 MB, ") and "files/s" in lines[1]
    assert "MB/s" in lines[1] and "ETA" in lines[1]

"""The diff report is pure: outcomes in, matrix/counts/lists out."""

from __future__ import annotations

import csv
import io

from app.relabel.report import NEW, Outcome, build_report, outcomes_csv


def _o(key: str, old: str | None, new: str | None, *, old_rule: str | None = "r-old", new_rule: str | None = "r-old",
       human: str | None = None, version: str = "v1", ok: bool = True, error: str | None = None) -> Outcome:
    return Outcome(key=key, ok=ok, job_id=int(key[1:]) if key.startswith("j") else None,
                   old_diagnosis_id=1 if old else None, old_error_type=old, old_rule_id=old_rule if old else None,
                   old_rules_version=version if old else None, new_diagnosis_id=100, new_error_type=new,
                   new_rule_id=new_rule, human_error_type=human, error=error)


def test_matrix_counts_rules_and_human_agreement():
    outcomes = [
        _o("j1", "ECCError", "CUDAError", old_rule="ecc", new_rule="cuda", human="ECCError"),  # regression
        _o("j2", "ECCError", "ECCError", old_rule="ecc", new_rule="ecc", version="v0"),
        _o("j3", "Unknown", "NodeFailure", old_rule=None, new_rule="bus", human="NodeFailure"),  # fixed
        _o("j4", "Hang", "Hang", old_rule=None, new_rule=None, human="NVLinkError"),  # still wrong
        _o("j5", "KeyError", "KeyError", old_rule="py-key", new_rule="py-key-2"),  # same type, new rule
        _o("j6", None, "OSError", new_rule="py-os"),  # never diagnosed before
        _o("j7", "Hang", None, ok=False, error="unreadable: gone"),
    ]
    r = build_report(outcomes, rules_version="v2")
    assert (r.logs, r.done, r.failed, r.changed, r.unchanged, r.new) == (7, 6, 1, 3, 3, 1)
    assert r.transitions == {NEW: {"OSError": 1}, "ECCError": {"CUDAError": 1, "ECCError": 1}, "Hang": {"Hang": 1},
                             "KeyError": {"KeyError": 1}, "Unknown": {"NodeFailure": 1}}
    assert [(v.rules_version, v.logs, v.changed) for v in r.by_rules_version] == [("v0", 1, 0), ("v1", 4, 3)]
    assert {x.rule_id: (x.lost, x.gained) for x in r.by_rule} == {
        "ecc": (1, 0), "cuda": (0, 1), "bus": (0, 1), "py-key": (1, 0), "py-key-2": (0, 1)}
    assert [c.key for c in r.changed_logs] == ["j1", "j3", "j5"]
    assert r.changed_logs[0].links == {"job": "/v1/jobs/1", "old_diagnosis": "/v1/diagnoses/1",
                                       "new_diagnosis": "/v1/diagnoses/100"}
    h = r.human
    assert (h.labelled, h.agree_before, h.agree_after) == (3, 1, 1)
    assert [c.key for c in h.regressions] == ["j1"] and [c.key for c in h.fixed] == ["j3"]
    assert [c.key for c in h.disagree_after] == ["j1", "j4"]
    assert [(f.key, f.error) for f in r.failed_logs] == [("j7", "unreadable: gone")]
    assert r.model_dump(by_alias=True)["schema"] == "logdx.relabel-report/v1"


def test_lists_are_bounded_but_counts_are_not():
    outcomes = [_o(f"j{i}", "Hang", "Unknown", new_rule="x") for i in range(1, 51)]
    r = build_report(outcomes, rules_version=None, max_listed=10)
    assert r.changed == 50 and len(r.changed_logs) == 10 and r.transitions == {"Hang": {"Unknown": 50}}


def test_csv_has_one_row_per_log():
    rows = list(csv.DictReader(io.StringIO(outcomes_csv([
        _o("j1", "ECCError", "CUDAError", human="ECCError"), _o("j2", "Hang", None, ok=False, error="bad")]))))
    assert [(r["key"], r["status"], r["changed"], r["human_agrees_before"], r["human_agrees_after"]) for r in rows] == [
        ("j1", "done", "1", "1", "0"), ("j2", "failed", "0", "", "")]

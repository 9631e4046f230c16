"""Golden tests: real logs in, reviewed diagnoses out; synthetic log in, reviewed compression out.

Set LOGDX_REGEN_GOLDEN=1 to rewrite the expected files, then review `git diff tests/golden`.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest


GOLDEN = Path(__file__).resolve().parent / "golden"
REGEN = os.environ.get("LOGDX_REGEN_GOLDEN") == "1"
CASES = sorted(p for p in (GOLDEN / "realworld").iterdir() if p.is_dir())
COMPRESS_CASES = sorted(p for p in (GOLDEN / "compress").iterdir() if p.is_dir()) \
    if (GOLDEN / "compress").is_dir() else []


def summary(d) -> dict:
    """The reviewed part of a diagnosis (versions and byte counts change with every rule edit)."""
    rc = d.root_cause
    return {
        "root_cause": {"error_type": rc.error_type.value, "category": rc.category.value,
                       "rule_id": rc.rule_id, "confidence": rc.confidence,
                       "evidence": [e.to_json_dict() for e in rc.evidence]},
        "co_occurring": [{"error_type": c.error_type.value, "role": c.role, "count": c.count,
                          "first_line": c.first_line} for c in d.co_occurring],
        "action": {"kind": d.action.kind.value, "suspect_hosts": d.action.suspect_hosts,
                   "suspect_ranks": d.action.suspect_ranks},
        "last_progress": d.last_progress.to_json_dict() if d.last_progress else None,
    }


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_realworld_diagnosis_matches_golden(pipeline, case):
    got = summary(pipeline.diagnose(case / "log.txt").diagnosis)
    expected_path = case / "expected.json"
    if REGEN or not expected_path.exists():
        expected_path.write_text(json.dumps(got, indent=2, ensure_ascii=False) + "\n")
        if not REGEN:
            pytest.fail(f"wrote missing golden {expected_path}; review and commit it")
    assert got == json.loads(expected_path.read_text())


def test_realworld_accuracy_against_human_labels(pipeline):
    rc_ok = act_ok = 0
    misses = []
    for case in CASES:
        label = json.loads((case / "label.json").read_text())
        d = pipeline.diagnose(case / "log.txt").diagnosis
        rc_ok += d.root_cause.error_type == label["root_cause"]
        act_ok += d.action.kind == label["action"]
        if d.root_cause.error_type != label["root_cause"] or d.action.kind != label["action"]:
            misses.append(f"{case.name}: {d.root_cause.error_type.value}/{d.action.kind.value} "
                          f"vs {label['root_cause']}/{label['action']}")
    n = len(CASES)
    assert rc_ok / n >= 0.9 and act_ok / n >= 0.9, "\n".join(misses)


@pytest.mark.parametrize("case", COMPRESS_CASES, ids=[c.name for c in COMPRESS_CASES])
def test_compression_matches_golden(pipeline, case):
    got = pipeline.compress(case / "input.log").text
    expected_path = case / "expected.txt"
    if REGEN or not expected_path.exists():
        expected_path.write_text(got)
        if not REGEN:
            pytest.fail(f"wrote missing golden {expected_path}; review and commit it")
    assert got == expected_path.read_text()

from pathlib import Path

import pytest

from app.core.pipeline import Pipeline
from app.web import logview

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def sample():
    result = Pipeline().diagnose(str(REPO / "examples" / "sample_job.log"))
    return result.compressed.text, result.diagnosis.to_json_dict()


def test_rendered_lines_parse_back_into_rows(sample):
    text, _ = sample
    header, rows = logview.parse(text)
    assert header[0].startswith("logdx compressed log:")
    assert [r.first for r in rows] == sorted(r.first for r in rows)
    folded = [r for r in rows if r.folded]
    assert folded, "the sample's watchdog timeouts fold into one template"
    watchdog = next(r for r in folded if "Watchdog caught collective operation timeout" in r.text)
    assert watchdog.count == 7 and watchdog.last > watchdog.first
    assert watchdog.kind == "flagged"
    assert any(r.kind == "context" for r in rows)


def test_evidence_and_co_occurring_errors_are_attached(sample):
    text, diagnosis = sample
    view = logview.build(text, diagnosis)
    evidence_lines = {e["line"] for e in diagnosis["root_cause"]["evidence"]}
    marked = [r for r in view.rows if r.evidence]
    assert {r.first for r in marked} == evidence_lines
    assert "uncorrectable ECC error" in marked[0].text
    assert view.evidence_anchor == min(evidence_lines)
    assert not view.unmatched_evidence
    roles = {role for r in view.rows for role, _ in r.roles}
    assert roles == {c["role"] for c in diagnosis["co_occurring"]}


def test_evidence_inside_a_fold_marks_the_folded_row():
    text = "# logdx compressed log: 10 lines in\n L1: start\n!L3-9 ×4 ranks[0,1]: boom <n>\n"
    view = logview.build(text, {"root_cause": {"evidence": [{"line": 7, "text": "boom 7"}, {"line": 42, "text": "x"}]}})
    assert [r.evidence for r in view.rows] == [False, True]
    assert view.rows[1].ranks == "0,1"
    assert [e["line"] for e in view.unmatched_evidence] == [42]

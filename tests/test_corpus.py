"""The real-failure corpus (tests/golden/corpus/<case>/): logs as posted in public threads and
other projects' fixtures, each with meta.json (source URL, labels, evidence for the label).

Every case is a regression test of root-cause type and action. Cases the current rules,
ranking or policy get wrong are listed in known_misses.json with the reason (strict xfail:
fixing one makes its test fail until the entry is removed), so the list is the honest record
of what is still missed. The summary test prints type, family and action accuracy.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from app.core.types import ActionKind, Category, ErrorType, family_of

CORPUS = Path(__file__).resolve().parent / "golden" / "corpus"
CASES = sorted(p for p in CORPUS.iterdir() if p.is_dir()) if CORPUS.is_dir() else []
KNOWN_MISSES: dict[str, str] = json.loads((CORPUS / "known_misses.json").read_text()) \
    if (CORPUS / "known_misses.json").exists() else {}
ROLES = {"symptom", "wrapper", "independent", "recovered"}


def _meta(case: Path) -> dict:
    return json.loads((case / "meta.json").read_text(encoding="utf-8"))


def _params():
    for case in CASES:
        marks = [pytest.mark.xfail(reason=KNOWN_MISSES[case.name], strict=True)] \
            if case.name in KNOWN_MISSES else []
        yield pytest.param(case, id=case.name, marks=marks)


@pytest.mark.parametrize("case", [pytest.param(c, id=c.name) for c in CASES])
def test_case_is_well_formed(case):
    meta = _meta(case)
    assert meta["source"].startswith("https://"), "every case cites its source URL"
    ErrorType(meta["root_cause"])
    Category(meta["category"])
    ActionKind(meta["action"])
    assert all(ErrorType(c["error_type"]) and c["role"] in ROLES for c in meta.get("co_occurring", []))
    log = (case / "log.txt").read_text(encoding="utf-8", errors="replace")
    if meta.get("evidence"):
        assert meta["evidence"].strip() in log, "evidence is a verbatim line of the log"
    if meta.get("negative_control"):
        assert (meta["root_cause"], meta["action"]) == ("Unknown", "investigate")


def test_known_misses_name_existing_cases():
    assert {k.removesuffix(" (hosts)") for k in KNOWN_MISSES} <= {c.name for c in CASES}


def test_sources_are_unique_and_not_in_the_dev_split():
    sources = [_meta(c)["source"] for c in CASES]
    dev = Path(__file__).resolve().parents[2] / "shared" / "realworld-dev" / "index.jsonl"
    dev_sources = {json.loads(line)["source"] for line in dev.read_text().splitlines()} \
        if dev.exists() else set()
    assert not dev_sources & set(sources)


@pytest.mark.parametrize("case", list(_params()))
def test_corpus_case(pipeline, case):
    meta = _meta(case)
    d = pipeline.diagnose(case / "log.txt").diagnosis
    got = (d.root_cause.error_type.value, d.action.kind.value)
    assert got == (meta["root_cause"], meta["action"]), (
        f"{case.name}: got {got[0]}/{got[1]} (rule {d.root_cause.rule_id}), "
        f"expected {meta['root_cause']}/{meta['action']}: {meta.get('why', '')}")


def _host_params():
    """Cases whose label names the hosts to drain (only an isolate action names hosts) and whose
    type and action are right: a known miss is already counted by test_corpus_case."""
    for case in CASES:
        meta = _meta(case)
        if meta.get("suspect_hosts") and meta["action"] == "isolate_and_restart" \
                and case.name not in KNOWN_MISSES:
            key = f"{case.name} (hosts)"  # type and action right, hosts not
            marks = [pytest.mark.xfail(reason=KNOWN_MISSES[key], strict=True)] if key in KNOWN_MISSES else []
            yield pytest.param(case, id=case.name, marks=marks)


@pytest.mark.parametrize("case", list(_host_params()))
def test_corpus_suspect_hosts(pipeline, case):
    meta = _meta(case)
    d = pipeline.diagnose(case / "log.txt").diagnosis
    assert sorted(d.action.suspect_hosts) == sorted(meta["suspect_hosts"]), d.action.reason


def test_corpus_summary(pipeline):
    """Accuracy over every case (known misses included); printed for bench/README.md."""
    if not CASES:
        pytest.skip("no corpus cases")
    n = len(CASES)
    t = f = a = 0
    for case in CASES:
        meta = _meta(case)
        d = pipeline.diagnose(case / "log.txt").diagnosis
        t += d.root_cause.error_type.value == meta["root_cause"]
        f += family_of(d.root_cause.error_type.value) == family_of(meta["root_cause"])
        a += d.action.kind.value == meta["action"]
    print(f"\ncorpus: type {t}/{n} = {t / n:.1%}, family {f}/{n} = {f / n:.1%}, action {a}/{n} = {a / n:.1%}")
    # every miss is a listed known miss (the per-case tests say which one)
    assert n - min(t, a) <= len([k for k in KNOWN_MISSES if not k.endswith(" (hosts)")])

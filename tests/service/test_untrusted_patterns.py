"""Proposed patterns come from engineers and models: they are run in RE2 only, refused when they
cannot be run safely or are too broad, and checked against the metric and normal line corpora;
however many arrive, diagnoses keep going."""

from __future__ import annotations

import time
from concurrent.futures import ThreadPoolExecutor

import httpx
import pytest

from app.auth.models import TokenRole
from tests.service.conftest import new_job, rules_copy, sample_log
from tests.service.live import LiveServer, issue_token
from tests.service.test_errors import assert_error

EVIDENCE = ["NVRM: GPU 0000:3b:00.0: GPU has fallen off the bus."]
# `(?:a|a)*` doubles the ways a backtracking engine can split each further `a`: on 40 `a`s and
# the literal without the end of line, `regex` tries 2^40 splits (28 `a`s: 9 s); RE2 one pass
EXPONENTIAL = r"^(?:a|a)*GPU has fallen off$"
NEAR_MISS = "a" * 40 + "GPU has fallen off!"


def propose(client, eng, pattern, evidence=EVIDENCE):  # noqa: ANN001, ANN201
    return client.post("/v1/rules/proposed", json={"pattern": pattern, "error_type": "NodeFailure",
                                                   "evidence": evidence}, headers=eng)


@pytest.mark.parametrize("pattern", [r"(a+)+$", r"(x+x+)+y", r"(\w+\s?)+GPU has fallen"])
def test_a_repetition_of_repetitions_is_refused_before_it_runs(client, eng, pattern):
    err = assert_error(propose(client, eng, pattern, evidence=["a" * 3999 + "b", "x" * 3999 + "!"]), 422,
                       "pattern_backtracks")
    assert "repetition of repetitions" in err["message"]


def test_an_exponential_pattern_is_checked_in_linear_time(client, eng):
    t0 = time.perf_counter()
    resp = propose(client, eng, EXPONENTIAL, evidence=[NEAR_MISS] * 50)
    elapsed = time.perf_counter() - t0
    assert resp.status_code == 201, resp.text
    validation = resp.json()["validation"]
    assert validation["engine"] == "re2" and not validation["valid"]
    assert validation["unmatched"] == [NEAR_MISS] * 50 and "misses 50 evidence" in validation["errors"][0]
    assert elapsed < 10, elapsed  # a backtracking engine with a 1 s timeout per line took 50 s


@pytest.mark.parametrize("pattern", ["0", ".", ".*", r"\d", r"\d+", "[A-Z]+", "(?:GPU)?", "a|GPU has fallen"])
def test_a_trivially_broad_pattern_is_refused_with_the_reason(client, eng, pattern):
    err = assert_error(propose(client, eng, pattern), 422, "pattern_too_broad")
    assert "literal character" in err["message"] or "empty string" in err["message"]


@pytest.mark.parametrize(("pattern", "words"), [
    (r"(GPU) has fallen off the bus\1", "backreference"),
    (r"(?=GPU)GPU has fallen off the bus", "lookahead"),
    (r"(?<!no )GPU has fallen off the bus", "negative lookbehind"),
    (r"(?>GPU) has fallen off the bus", "atomic group"),
    (r"GPU has fallen off the bus.*+", "possessive quantifier"),
])
def test_a_pattern_re2_cannot_run_is_refused_naming_the_construct(client, eng, pattern, words):
    err = assert_error(propose(client, eng, pattern), 422, "pattern_not_re2")
    assert words in err["message"] and "RE2 cannot run" in err["message"]


def test_a_pattern_matching_a_metric_or_normal_line_cannot_be_approved(client, eng, admin):
    line = "iteration      100/    1000 | lm loss: 2.3E+00 | number of nan iterations: 1 | GPU has fallen off the bus"
    resp = propose(client, eng, r"number of nan iterations: \d+", evidence=[line])
    assert resp.status_code == 201, resp.text
    validation = resp.json()["validation"]
    assert not validation["valid"] and validation["benign_matched"]
    assert any("metric or normal training line" in e for e in validation["errors"])
    assert_error(client.post(f"/v1/rules/proposed/{resp.json()['id']}/approve", headers=admin), 409, "invalid_rule")


def test_a_specific_pattern_passes_every_check(client, eng):
    resp = propose(client, eng, r"GPU has fallen off the bus")
    assert resp.status_code == 201, resp.text
    validation = resp.json()["validation"]
    assert validation["valid"] and validation["errors"] == [] and validation["benign_total"] > 100


def test_impact_refuses_a_stored_pattern_re2_cannot_run(app, client, eng):
    from app.llm.ports import ProposedRule
    from app.rules_review.sink import store_proposal

    rule = {"id": "legacy-backref", "error_type": "NodeFailure", "pattern": r"(GPU) fell\1 off the bus",
            "examples": {"match": ["GPU fellGPU off the bus"]}}
    row_id = app.state.services.db.run(lambda session: store_proposal(session=session, rule=ProposedRule(
        "diagnosis", "proposed", rule, ["GPU fellGPU off the bus"], {}, "before RE2")).id)
    assert_error(client.get(f"/v1/rules/proposed/{row_id}/impact", headers=eng), 422, "pattern_not_re2")


def test_a_diagnosis_completes_while_twenty_exponential_proposals_are_checked(tmp_path):
    data = tmp_path / "data"
    server = LiveServer({"LOGDX_DATA_DIR": str(data), "LOGDX_RULES_DIR": str(rules_copy(tmp_path / "rules"))})
    server.start(timeout=60)
    try:
        url = f"sqlite:///{data / 'logdx.db'}"
        eng = {"Authorization": f"Bearer {issue_token(url, TokenRole.ENGINEER, 'e')}"}
        sched = {"Authorization": f"Bearer {issue_token(url, TokenRole.SCHEDULER, 's')}"}
        with httpx.Client(base_url=server.url, timeout=120) as http:
            job = new_job(http, sched)["id"]
            assert http.put(f"/v1/jobs/{job}/log", content=sample_log(), headers=sched).status_code == 201
        body = {"pattern": EXPONENTIAL, "error_type": "NodeFailure", "evidence": [NEAR_MISS] * 50}

        def bad(_: int) -> int:
            return httpx.post(server.url + "/v1/rules/proposed", json=body, headers=eng, timeout=120).status_code

        def diagnose() -> tuple[int, float]:
            t0 = time.perf_counter()
            resp = httpx.post(f"{server.url}/v1/jobs/{job}/diagnoses", headers=sched, timeout=120)
            return resp.status_code, time.perf_counter() - t0

        with ThreadPoolExecutor(21) as pool:
            t0 = time.perf_counter()
            tries = [pool.submit(bad, i) for i in range(20)]
            diagnosis = pool.submit(diagnose)
            statuses = [t.result() for t in tries]
            status, took = diagnosis.result()
            total = time.perf_counter() - t0
        assert statuses == [201] * 20 and status == 200
        # a backtracking engine spent 50 s per proposal holding the interpreter; RE2 a few ms
        assert total < 60, (took, total)
    finally:
        server.kill()

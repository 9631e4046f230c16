"""The rules page's try form runs a proposal's pattern in RE2 over pasted text: a pattern that
would backtrack is not run, one RE2 can run answers in one pass however it is written."""

from __future__ import annotations

import time

from app.llm.ports import ProposedRule
from app.rules_review.sink import store_proposal
from tests.web.conftest import sign_in


def _stored(app, pattern: str) -> int:  # noqa: ANN001
    """A proposal stored without the proposal checks (as rows from before them are)."""
    rule = {"id": "legacy", "error_type": "NodeFailure", "pattern": pattern, "examples": {"match": ["xy"]}}
    return app.state.services.db.run(lambda session: store_proposal(session=session, rule=ProposedRule(
        "diagnosis", "proposed", rule, ["xy"], {}, "before RE2")).id)


def test_try_does_not_run_a_pattern_that_backtracks(app, client, tokens):
    rule_id = _stored(app, r"(x+x+)+y")
    csrf = sign_in(client, tokens["engineer"])
    t0 = time.perf_counter()
    tried = client.post(f"/ui/rules/proposed/{rule_id}/try", data={"csrf": csrf, "text": ("x" * 3000 + "\n") * 40})
    elapsed = time.perf_counter() - t0
    assert tried.status_code == 200
    assert "The pattern was not run" in tried.text and "repetition of repetitions" in tried.text
    assert elapsed < 10, elapsed  # a backtracking engine with a 0.5 s timeout per line took 20 s


def test_try_runs_an_exponential_pattern_in_one_pass(app, client, tokens, eng):
    evidence = "a" * 12 + "GPU has fallen off"
    rule = client.post("/v1/rules/proposed", headers=eng, json={
        "pattern": r"^(?:a|a)*GPU has fallen off$", "error_type": "NodeFailure", "evidence": [evidence]}).json()
    assert rule["validation"]["valid"], rule["validation"]
    csrf = sign_in(client, tokens["engineer"])
    text = ("a" * 40 + "GPU has fallen off!\n") * 200 + evidence + "\n"  # 2^40 splits each for `regex`
    t0 = time.perf_counter()
    tried = client.post(f"/ui/rules/proposed/{rule['id']}/try", data={"csrf": csrf, "text": text})
    elapsed = time.perf_counter() - t0
    assert "1 of 201 lines match" in tried.text and "line 201" in tried.text
    assert elapsed < 10, elapsed  # 200 lines x 0.5 s timeouts before


def test_try_names_what_re2_cannot_run(app, client, tokens):
    rule_id = _stored(app, r"(GPU) fell\1 off")
    csrf = sign_in(client, tokens["engineer"])
    tried = client.post(f"/ui/rules/proposed/{rule_id}/try", data={"csrf": csrf, "text": "GPU fellGPU off\n"})
    assert "The pattern was not run" in tried.text and "backreference" in tried.text

"""Help on logs no rule explains: the rule library's match examples as a retrieval corpus, the
candidates they give the failure agent, and the no-model fallback vote (real MiniLM)."""

from __future__ import annotations

import dataclasses
import io
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from app.core.pipeline import Pipeline
from app.core.types import DecidedBy, ErrorType
from app.llm.agent import FailureAgent
from app.llm.backends.fake import FakeBackend
from app.llm.client import LLMClient
from app.llm.examples import ExampleIndex, error_looking_lines, error_score, rule_examples
from app.llm.factory import build_fallback_agent

REPO = Path(__file__).resolve().parents[2]
S3_LINE = "botocore.exceptions.ClientError: An error occurred (SlowDown) when calling the PutObject operation: Please reduce your request rate."


def test_every_diagnosis_rule_contributes_its_examples_with_resolved_types():
    rules = Pipeline().ruleset.diagnosis
    examples = rule_examples(rules)
    assert len(examples) >= len(rules)
    assert {e.rule_id for e in examples} == {r.id for r in rules if r.spec.error_type.value not in ("Unknown", "ChildFailedError")} \
        or len({e.rule_id for e in examples}) > 0.9 * len(rules)
    generic = [r for r in rules if r.spec.type_from_group]
    for r in generic:  # a catch-all rule's example is typed by the class it names, when canonical
        for e in (e for e in examples if e.rule_id == r.id):
            m = r.regex.search(e.text)
            name = m.group(r.spec.type_from_group).rsplit(".", 1)[-1]
            if name in ErrorType.__members__ and name not in ("Unknown", "ChildFailedError"):
                assert e.error_type.value == name


def test_error_looking_lines_prefer_exception_lines_over_headers_and_warnings():
    flagged = [(3, "Traceback (most recent call last):"), (4, '  File "train.py", line 9, in <module>'),
               (9, "WARNING: dataloader is slow"), (12, "mpi4py.MPI.Exception: MPI_ERR_TRUNCATE: message truncated"),
               (13, "job failed after 3 retries"), (14, "mpi4py.MPI.Exception: MPI_ERR_TRUNCATE: message truncated")]
    got = error_looking_lines(flagged)
    assert got[0] == (12, "mpi4py.MPI.Exception: MPI_ERR_TRUNCATE: message truncated")
    assert (13, "job failed after 3 retries") in got
    assert all(error_score(t) > 0 for _, t in got) and len({t for _, t in got}) == len(got)
    # a line logged at INFO is not its error, whatever word it carries
    info = [(26, "INFO:torch.distributed.elastic.multiprocessing:Setting worker0 reply file to: /log/attempt_0/0/error.json")]
    assert error_looking_lines(info) == []


# the rules that know the S3 line: the generic botocore rule and the object-store catalog's
S3_RULES = ("s3-client-error", "objstore-throttled-or-unavailable")


def _without(*rule_ids: str) -> Pipeline:
    """The shipped rules minus these: what logdx knows if they had never been written (their
    examples go with them, so the answer must come from the other rules' examples)."""
    full = Pipeline()
    kept = [r for r in full.ruleset.diagnosis if r.id not in rule_ids]
    assert len(kept) == len(full.ruleset.diagnosis) - len(rule_ids)
    return Pipeline(dataclasses.replace(full.ruleset, diagnosis=kept))


WANDB_LINE = "wandb.errors.CommError: Run initialization has timed out after 90.0 sec."


@pytest.fixture
def no_exception_table(monkeypatch):
    """The exception table (rules/exceptions.yaml) types these exception classes whatever rule is
    left: a log no rule knows is one whose class the table does not know either."""
    from app.core import ablation

    monkeypatch.setenv("LOGDX_ABLATE", "exceptions")
    ablation._off.cache_clear()
    yield
    monkeypatch.delenv("LOGDX_ABLATE")
    ablation._off.cache_clear()


@pytest.mark.slow
def test_nearest_examples_vote_for_the_right_family_and_abstain_when_far(minilm):
    index = ExampleIndex(minilm, rule_examples(Pipeline().ruleset.diagnosis))
    vote = index.vote([(7, S3_LINE)])
    assert vote is not None and vote.error_type is ErrorType.S3StorageError and vote.line == 7
    assert index.vote([(1, "the quick brown fox jumps over the lazy dog")]) is None


@pytest.mark.slow
@pytest.mark.parametrize(("rule_id", "line", "expected", "action"), [
    (S3_RULES, S3_LINE, ErrorType.S3StorageError, "retry"),
    (("wandb-init-or-comm-error",), WANDB_LINE, ErrorType.ConnectionError, "retry"),
])
def test_no_rule_log_gets_a_typed_answer_with_evidence_without_a_model(minilm, no_exception_table, rule_id, line,
                                                                       expected, action):
    ablated = _without(*rule_id)
    log = f"step 10 loss 2.1\nsaving checkpoint step_10\n{line}\n"
    result = ablated.diagnose(io.BytesIO(log.encode()), workers=1)
    assert result.diagnosis.root_cause.error_type is ErrorType.Unknown  # the rules alone do not know it
    d = build_fallback_agent(ablated.ruleset, embedder=minilm).refine(result)
    assert d.decided_by is DecidedBy.RETRIEVAL and d.root_cause.error_type is expected
    assert d.root_cause.evidence[0].line == 3 and d.root_cause.evidence[0].text == line
    assert d.root_cause.confidence <= 0.6 and d.action.kind.value == action


@pytest.mark.slow
@pytest.mark.parametrize("answer", ["unreachable", "unsure"])
def test_with_a_model_that_gives_no_answer_the_vote_is_only_a_suggestion(minilm, no_exception_table, answer):
    """A model is configured but its call fails or its answer is not accepted: the rules' Unknown
    stands and the nearest examples' type is a note, as without a model (as the answer the vote
    raised false alarms on a fresh split)."""
    from app.llm.errors import LLMError

    def reply(prompt, schema):
        if answer == "unreachable":
            raise LLMError("connection refused")
        return {"choice": "other", "error_type": "S3StorageError", "category": "infrastructure", "action": "retry",
                "confidence": 0.3, "explanation": "line 3 looks like throttling", "evidence_lines": [3]}

    ablated = _without(*S3_RULES)
    result = ablated.diagnose(io.BytesIO(f"step 10 loss 2.1\nsaving checkpoint step_10\n{S3_LINE}\n".encode()),
                              workers=1)
    agent = FailureAgent(LLMClient(FakeBackend(json_answer=reply)), policies=ablated.ruleset.policies,
                         examples=ExampleIndex(minilm, rule_examples(ablated.ruleset.diagnosis)))
    d = agent.refine(result)
    assert (d.decided_by, d.root_cause.error_type) == (DecidedBy.RULES, ErrorType.Unknown)
    assert d.action.kind.value == "investigate"
    [note] = [n for n in d.notes if n.startswith("suggestion, not applied")]
    assert "S3StorageError?" in note
    assert any(n.startswith("llm") for n in d.notes)  # why the model's answer was not used


@pytest.mark.slow
def test_local_scoring_model_gets_candidates_on_a_no_rule_log(minilm, no_exception_table):
    ablated = _without(*S3_RULES)
    result = ablated.diagnose(io.BytesIO(f"step 1 loss 2.0\n{S3_LINE}\n".encode()), workers=1)
    backend = FakeBackend(supports_json=False, choice_scores=lambda prompt, letters: [0.0] * len(letters))
    agent = FailureAgent(LLMClient(backend), policies=ablated.ruleset.policies,
                         examples=ExampleIndex(minilm, rule_examples(ablated.ruleset.diagnosis)))
    cands = [c for c in agent.candidates(result) if c.id.startswith("x")]
    assert len(cands) >= 2 and all(c.line == 2 for c in cands)
    assert ErrorType.S3StorageError in {c.error_type for c in cands}
    verdict = agent.decide(result)  # used to raise "choice mode needs at least two candidates"
    assert verdict.mode == "choice" and verdict.evidence_lines == [2]
    assert backend.prompts and "SlowDown" in backend.prompts[-1]


@pytest.mark.slow
def test_cli_without_llm_uses_the_examples_on_a_no_rule_log(tmp_path):
    import yaml

    rules = tmp_path / "rules"
    subprocess.run(["cp", "-r", str(REPO / "rules"), str(rules)], check=True)
    for name in ("storage.yaml", "objectstore.yaml"):  # every rule that knows the S3 line
        path = rules / name
        doc = yaml.safe_load(path.read_text())
        doc["rules"] = [r for r in doc["rules"] if r["id"] not in S3_RULES]
        path.write_text(yaml.safe_dump(doc, sort_keys=False))
    log = tmp_path / "job.log"
    log.write_text(f"step 1 loss 2.0\n{S3_LINE}\n")
    # the exception table would type the botocore class: off, as in the tests above
    env = {**os.environ, "PYTHONPATH": str(REPO), "LOGDX_LLM_BACKEND": "none", "LOGDX_ABLATE": "exceptions"}
    out = subprocess.run([sys.executable, "-m", "app.cli", "diagnose", str(log), "--json", "--rules", str(rules)],
                         cwd=REPO, env=env, capture_output=True, text=True, check=True)
    d = json.loads(out.stdout)
    # the vote is a suggestion: the rules' answer stands (a vote alone was wrong more often than
    # right on the labelled splits), and the note names the nearest examples' type and line
    assert (d["decided_by"], d["root_cause"]["error_type"]) == ("rules", "Unknown")
    [note] = [n for n in d["notes"] if n.startswith("suggestion, not applied")]
    assert "S3StorageError?" in note and "Line 2 is closest" in note
    # LOGDX_ABLATE=retrieval switches the suggestion off too
    env["LOGDX_ABLATE"] = "exceptions,retrieval"
    out = subprocess.run([sys.executable, "-m", "app.cli", "diagnose", str(log), "--json", "--rules", str(rules)],
                         cwd=REPO, env=env, capture_output=True, text=True, check=True)
    d = json.loads(out.stdout)
    assert (d["decided_by"], d["root_cause"]["error_type"]) == ("rules", "Unknown")
    assert not [n for n in d["notes"] if n.startswith("suggestion")]


@pytest.mark.slow
def test_a_nearest_example_guess_never_drains_a_node(minilm, no_exception_table):
    """A line no rule matched that only resembles a hardware or node-loss rule's examples is typed
    by the resemblance, but its action is investigate: an isolate drains a node on evidence, and a
    resemblance is not evidence (the engineer or the node probe decides)."""
    log = "step 10 loss 2.1\nray.exceptions.ActorDiedError: The actor died unexpectedly before finishing this task.\n"
    result = Pipeline().diagnose(io.BytesIO(log.encode()), workers=1)
    assert result.diagnosis.root_cause.error_type is ErrorType.Unknown
    d = build_fallback_agent(Pipeline().ruleset, embedder=minilm).refine(result)
    assert d.decided_by is DecidedBy.RETRIEVAL and d.root_cause.error_type is ErrorType.NodeFailure
    assert d.action.kind.value == "investigate" and "does not drain a node" in d.action.reason


def test_retrieval_reads_no_line_the_run_went_on_after() -> None:
    """An error-looking line no rule knows, followed by more training steps, did not stop the run
    (the rules' ranking says so): the example vote must not read it as the failure either. The
    same line at the end of the log is the candidate."""
    odd = "ERROR frobnicator: widget pipeline failed to reticulate splines"
    steps = [f"step {i} loss {2.0 - i / 100:.3f}" for i in range(1, 30)]
    agent = FailureAgent(LLMClient(FakeBackend()), policies=Pipeline().ruleset.policies)
    went_on = Pipeline().diagnose(io.BytesIO("\n".join(steps[:5] + [odd] + steps[5:]).encode() + b"\n"), workers=1)
    assert agent._error_lines(went_on) == []
    at_end = Pipeline().diagnose(io.BytesIO("\n".join(steps + [odd]).encode() + b"\n"), workers=1)
    assert [text for _, text in agent._error_lines(at_end)] == [odd]


def test_retrieval_leaves_a_line_whose_rule_decided_it() -> None:
    """A native crash's rule types it Unknown on purpose and prescribes investigate (the cause is
    not in the log): the example vote does not re-type that line (`Segmentation fault` used to be
    read as a DataLoader worker's death, no_retry)."""
    agent = FailureAgent(LLMClient(FakeBackend()), policies=Pipeline().ruleset.policies)
    result = Pipeline().diagnose(io.BytesIO(b"step 1 loss 2.0\nSegmentation fault (core dumped)\n"), workers=1)
    assert (result.diagnosis.root_cause.error_type.value, result.diagnosis.action.kind.value) == ("Unknown", "investigate")
    assert agent._error_lines(result) == []

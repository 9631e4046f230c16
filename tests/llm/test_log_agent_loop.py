"""The seed paper's loop end to end, on rule files: a log the rules do not know is compressed,
a rule is proposed from it and validated, an admin's approval writes it into the rule library
(`append_rule`, what the approval API calls), and the next run of the same log uses it."""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

import pytest

from app.core.pipeline import Pipeline
from app.core.rules import FilterRuleSpec
from app.core.types import DecidedBy, ErrorType
from app.llm.agent import FailureAgent
from app.llm.backends.fake import FakeBackend
from app.llm.client import LLMClient
from app.llm.ports import InMemoryProposedRuleSink
from app.llm.rulewriter import propose_filter_rules
from app.rules_review.rulefiles import append_rule

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "bench"))
from gen_newformat import generate  # noqa: E402


@pytest.fixture
def rules_dir(tmp_path) -> Path:
    d = tmp_path / "rules"
    shutil.copytree(REPO / "rules", d)
    return d


def test_filter_rule_for_a_new_metric_format_shrinks_the_next_compression(tmp_path, rules_dir):
    log = tmp_path / "newformat.log"
    truth = generate(log, steps=3000, hosts=4)
    before = Pipeline(rules_dir=rules_dir).diagnose(log, workers=1)
    stats = before.compressed.stats
    assert stats.lines_kept == stats.lines_in == truth["lines"]  # no filter knows this format
    # the format-free signals (app/core/signals.py) read its step counter without a filter rule,
    # but every line is still kept: the approved filter rule is what drops them
    assert before.compressed.inferred_progress

    proposals = [p for p in propose_filter_rules(before.compressed) if p.rule is not None]
    assert len(proposals) == 1, [p.reason for p in propose_filter_rules(before.compressed)]
    rule = proposals[0].rule
    spec = FilterRuleSpec.from_json_dict(rule.rule)  # the validated rule, as approval writes it
    assert spec.extract and spec.progress and rule.validation["chosen"]["ok"]
    append_rule(rules_dir=rules_dir, kind=rule.kind, family=rule.family, rule=rule.rule)

    after = Pipeline(rules_dir=rules_dir).diagnose(log, workers=1)
    a = after.compressed.stats
    assert a.lines_in == stats.lines_in and a.lines_kept * 100 <= stats.lines_kept
    text = after.compressed.text
    assert all(line in text for line in truth["error_lines"][-1:])  # every error line kept
    assert after.diagnosis.root_cause.error_type is ErrorType.ECCError
    assert after.diagnosis.action.suspect_hosts == [truth["host"]]
    assert after.compressed.last_progress is not None and after.compressed.last_progress.step == truth["last_step"]
    assert after.compressed.metrics and all("loss" in p.values for p in after.compressed.metrics)


def test_approved_filter_rule_still_catches_nan_losses(tmp_path, rules_dir):
    learn = tmp_path / "learn.log"
    generate(learn, steps=600, hosts=2)
    rule = next(p.rule for p in propose_filter_rules(Pipeline(rules_dir=rules_dir).diagnose(learn, workers=1).compressed)
                if p.rule is not None)
    append_rule(rules_dir=rules_dir, kind=rule.kind, family=rule.family, rule=rule.rule)
    nan_log = tmp_path / "nan.log"
    generate(nan_log, steps=600, hosts=2, nan_at=550)
    d = Pipeline(rules_dir=rules_dir).diagnose(nan_log, workers=1)
    assert d.compressed.nan_points and d.compressed.nan_points[0].step == 550


def test_diagnosis_rule_from_an_llm_answer_needs_no_llm_next_time(tmp_path, rules_dir):
    """A log no rule explains; a JSON model (the protocol fake standing in for a hosted one)
    answers `other` with a type; the agent proposes a rule; once approved, the rules alone
    diagnose the next occurrence (on another host, at another step)."""
    line = "fabric-agent: link flap storm on port 7, collective aborted by the fabric manager"
    log = tmp_path / "unknown.log"
    log.write_text("step 1 loss 2.0\nstep 2 loss 1.9\n" + line + "\n")
    pipeline = Pipeline(rules_dir=rules_dir)
    result = pipeline.diagnose(log, workers=1)
    assert result.diagnosis.root_cause.error_type is ErrorType.Unknown
    answer = {"choice": "other", "error_type": "NetworkError", "category": "infrastructure",
              "action": "isolate_and_restart", "confidence": 0.9, "evidence_lines": [3],
              "explanation": "Line 3: the fabric manager aborted the collective after a link flap storm."}
    sink = InMemoryProposedRuleSink()
    agent = FailureAgent(LLMClient(FakeBackend(json_answer=answer)), policies=pipeline.ruleset.policies,
                         rule_sink=sink)
    d = agent.refine(result)
    assert d.decided_by is DecidedBy.LLM and d.root_cause.error_type is ErrorType.NetworkError
    (proposal,) = sink.proposals.values()
    append_rule(rules_dir=rules_dir, kind=proposal.kind, family=proposal.family, rule=proposal.rule)

    again = tmp_path / "again.log"
    again.write_text("step 9 loss 1.2\n" + line.replace("port 7", "port 31") + "\n")
    d2 = Pipeline(rules_dir=rules_dir).diagnose(again, workers=1).diagnosis
    assert d2.decided_by is DecidedBy.RULES and d2.root_cause.error_type is ErrorType.NetworkError
    assert d2.root_cause.rule_id == proposal.rule["id"]

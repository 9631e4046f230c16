import pytest

from app.core.rules import DiagnosisRuleSpec, FilterRuleSpec
from app.core.types import Category, ErrorType
from app.llm.ports import InMemoryProposedRuleSink
from app.llm.rulewriter import DiagnosisRuleWriter, FilterRuleWriter, validate_rule
from app.llm.rulewriter.writers import default_metric_negatives

EVIDENCE = ["[rank3]: RuntimeError: NCCL communicator was aborted on rank 3. Original reason for failure was: "
            "NCCL error: unhandled system error (run with NCCL_DEBUG=INFO for details)"]
METRICS = default_metric_negatives()


def rule(pattern, match=EVIDENCE):
    return {"id": "proposed-x", "error_type": "NCCLRemoteError", "pattern": pattern,
            "examples": {"match": list(match), "no_match": []}}


def check(pattern, **kw):
    return validate_rule(rule(pattern), kind="diagnosis", positives=EVIDENCE, negatives=METRICS, **kw)


def test_accepts_a_good_rule():
    v = check(r"NCCL error: unhandled system error")
    assert v.ok, v.errors
    assert v.re2_compatible


def test_rejects_non_compiling_regex():
    v = check(r"NCCL error: (unhandled")
    assert not v.ok and "does not compile" in v.errors[0]


def test_rejects_a_rule_matching_metric_lines():
    v = check(r"(?:NCCL error|lm loss)")
    assert not v.ok and any("negative line" in e for e in v.errors)


def test_rejects_catastrophic_backtracking():
    v = validate_rule(rule(r"^(a|a)*$|(\w+\s?)+NCCL error: unhandled system error$", match=[]),
                      kind="diagnosis", positives=["a" * 5], negatives=[])
    assert not v.ok and any("catastrophic" in e for e in v.errors)


def test_rejects_a_rule_missing_its_evidence():
    v = check(r"CUDA error: an illegal memory access")
    assert not v.ok and any("misses 1 evidence" in e for e in v.errors)


def test_rejects_unknown_groups_and_empty_matches():
    assert any("unknown named group" in e for e in check(r"NCCL error: (?P<whatever>\w+)").errors)
    assert any("empty string" in e for e in check(r"(?:NCCL error)?").errors)


def test_diagnosis_writer_proposes_a_valid_generalising_rule():
    sink = InMemoryProposedRuleSink()
    p = DiagnosisRuleWriter().propose(evidence=EVIDENCE, error_type=ErrorType.NCCLRemoteError,
                                      category=Category.INFRASTRUCTURE, sink=sink)
    assert p.rule is not None and p.proposal_id == "1", p.validations
    spec = DiagnosisRuleSpec.from_json_dict(p.rule.rule)  # approval writes exactly this to rules/
    import regex

    compiled = regex.compile(spec.pattern)
    assert compiled.search(EVIDENCE[0].replace("rank3", "rank17").replace("rank 3", "rank 17"))
    assert not any(compiled.search(m) for m in METRICS)
    assert p.rule.validation["chosen"]["ok"] and len(p.validations) >= 2


def test_filter_writer_proposes_metric_filters_that_spare_error_lines():
    lines = [(f"[Rank 0] iter {i} | lm loss 2.{i:03d} | lr 3.0e-4 | 152340 tokens/s", 1) for i in range(40)]
    lines += [("RuntimeError: CUDA error: out of memory", 40)]
    errors = ["RuntimeError: CUDA error: out of memory", "NCCL error: unhandled system error",
              "torch.cuda.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB"]
    sink = InMemoryProposedRuleSink()
    proposals = FilterRuleWriter(negatives=errors, min_count=20).propose(lines, sink=sink)
    assert len(proposals) == 1 and proposals[0].rule is not None
    spec = FilterRuleSpec.from_json_dict(proposals[0].rule.rule)
    assert spec.filter.value == "metric"
    assert proposals[0].rule.validation["count"] == 40


@pytest.mark.parametrize("line", [
    "OSError: [Errno 28] No space left on device: '/mnt/ckpt/step_100/model.pt'",
    "2024-01-02T03:04:05Z node-3 kernel: NVRM: Xid (PCI:0000:3b:00): 79, pid=1234, GPU has fallen off the bus.",
])
def test_generalised_candidates_validate_on_real_shapes(line):
    p = DiagnosisRuleWriter().propose(evidence=[line], error_type=ErrorType.OSError, category=Category.SCRIPT)
    assert p.rule is not None, {k: v.errors for k, v in p.validations.items()}


def test_filter_negatives_from_real_dev_cases_spare_every_evidence_line():
    from pathlib import Path

    from app.llm.rulewriter.writers import error_lines_from_cases

    root = Path("/work/shared/realworld-dev/cases")
    if not root.is_dir():
        pytest.skip("real-world dev cases not available")
    errors = error_lines_from_cases(root)
    assert len(errors) >= 20
    lines = [(f"{{'loss': {1 + i / 100:.4f}, 'grad_norm': 0.{i:02d}, 'learning_rate': 4.9e-05, 'epoch': 0.{i:02d}}}", 1)
             for i in range(30)]
    proposals = FilterRuleWriter(negatives=errors, min_count=20).propose(lines)
    assert proposals and proposals[0].rule is not None
    assert proposals[0].rule.validation["chosen"]["negatives_total"] == len(errors)

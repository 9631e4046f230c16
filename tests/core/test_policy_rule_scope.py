"""A policy scoped to the rule that found the root cause (`rule:` in a policy entry): it applies
to that rule's finding only, other rules of the same error type fall through to the next entry,
and a `rule:` naming no loaded diagnosis rule is a load error, not a silently dead policy."""

from __future__ import annotations

import pytest

from app.core.policy import PolicyContext, decide
from app.core.rules import RuleError, load_rules
from app.core.types import ActionKind, Category, ErrorType


SCOPED = """\
kind: policy
family: scoped
rules:
  - id: t-ecc-after-training
    error_type: ECCError
    rule: t-ecc
    when: [after_training]
    action: retry
    reason: scoped to t-ecc after training
"""


def _ctx(rule_id: str | None, trained: bool) -> PolicyContext:
    return PolicyContext(error_type=ErrorType.ECCError, category=Category.INFRASTRUCTURE, confidence=0.9,
                         rule_id=rule_id, trained_before=trained)


def test_a_rule_scoped_policy_applies_to_that_rules_finding_only(rules_dir):
    (rules_dir / "aa_scoped.yaml").write_text(SCOPED)
    ruleset = load_rules(rules_dir, overlay=None)
    policies = ruleset.policies
    assert decide(_ctx("t-ecc", True), policies).policy_id == "t-ecc-after-training"
    # the same type from another rule, or the same rule before training: the next entry (ecc)
    assert decide(_ctx("t-other-ecc", True), policies).kind is ActionKind.ISOLATE_AND_RESTART
    assert decide(_ctx("t-ecc", False), policies).kind is ActionKind.ISOLATE_AND_RESTART
    assert decide(_ctx(None, True), policies).kind is ActionKind.ISOLATE_AND_RESTART


def test_a_policy_naming_an_unknown_rule_does_not_load(rules_dir):
    (rules_dir / "aa_scoped.yaml").write_text(SCOPED.replace("rule: t-ecc", "rule: t-ecc-typo"))
    with pytest.raises(RuleError, match="t-ecc-typo"):
        load_rules(rules_dir, overlay=None)

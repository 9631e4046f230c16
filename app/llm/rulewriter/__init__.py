"""Rule writers and the validation every proposed rule passes before review."""

from app.llm.rulewriter.validate import Validation, validate_rule
from app.llm.rulewriter.writers import (
    DiagnosisRuleWriter, FilterRuleWriter, Proposal, propose_filter_rules, surviving_lines,
)

__all__ = ["DiagnosisRuleWriter", "FilterRuleWriter", "Proposal", "Validation",
           "propose_filter_rules", "surviving_lines", "validate_rule"]

"""Rule writers and the validation every proposed rule passes before review."""

from app.llm.rulewriter.validate import Validation, validate_rule
from app.llm.rulewriter.writers import DiagnosisRuleWriter, FilterRuleWriter, Proposal, surviving_lines

__all__ = ["DiagnosisRuleWriter", "FilterRuleWriter", "Proposal", "Validation", "surviving_lines", "validate_rule"]

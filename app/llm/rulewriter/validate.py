"""Validation a proposed rule must pass before it is stored for review. Every check runs the
pattern in RE2 (`app.core.untrusted`: linear time, so a model's pattern cannot backtrack here):

1. compiles in RE2 and in the `regex` module (as rules/ are loaded), uses only known named groups;
2. does not match the empty string and needs enough literal text (too generic);
3. is no repetition of repetitions (`(a+)+`), which would backtrack in `regex` when it extracts
   the approved rule's groups;
4. matches every one of its evidence lines;
5. matches nothing in the negative corpus (metric lines for diagnosis rules, error lines for
   filter rules);
6. the emitted rule dict is valid under DiagnosisRuleSpec / FilterRuleSpec and its examples pass.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from pydantic import ValidationError

from app.core.rules import DiagnosisRuleSpec, FilterRuleSpec
from app.core.untrusted import PatternRefused, compile_untrusted
from app.core.validation import error_message


@dataclass
class Validation:
    ok: bool
    errors: list[str] = field(default_factory=list)
    positives_matched: int = 0
    positives_total: int = 0
    negatives_matched: list[str] = field(default_factory=list)
    negatives_total: int = 0
    re2_compatible: bool = False
    engine: str = "re2"

    def to_json_dict(self) -> dict[str, Any]:
        return asdict(self)


def validate_rule(rule: dict[str, Any], *, kind: str, positives: Sequence[str], negatives: Sequence[str]) -> Validation:
    """Validate a complete rule dict (as it would be written to rules/*.yaml)."""
    pattern = rule.get("pattern", "")
    v = Validation(ok=False, positives_total=len(positives), negatives_total=len(negatives))
    if not isinstance(pattern, str):
        v.errors.append("does not compile: the pattern is not a string")
        return v
    try:
        compiled = compile_untrusted(pattern, ignore_case=bool(rule.get("ignore_case")))
    except PatternRefused as exc:
        prefix = {"pattern_backtracks": "catastrophic backtracking: ",
                  "invalid_pattern": "does not compile: " if "does not compile" in exc.reason else ""}
        v.errors.append(prefix.get(exc.code, "") + exc.reason)
        return v
    v.re2_compatible = True
    missing = [line for line in positives if not compiled.search(line)]
    v.positives_matched = len(positives) - len(missing)
    if missing:
        v.errors.append(f"misses {len(missing)} evidence line(s), e.g. {missing[0][:160]!r}")
    if not positives:
        v.errors.append("no evidence lines to check against")
    v.negatives_matched = compiled.matching(negatives)
    if v.negatives_matched:
        v.errors.append(f"matches {len(v.negatives_matched)} negative line(s), e.g. {v.negatives_matched[0][:160]!r}")
        v.negatives_matched = v.negatives_matched[:5]
    model = DiagnosisRuleSpec if kind == "diagnosis" else FilterRuleSpec
    try:
        spec = model.from_json_dict(rule)
        for ex in spec.examples.match:
            if not compiled.search(ex):
                v.errors.append(f"example does not match: {ex[:120]!r}")
        for ex in spec.examples.no_match:
            if compiled.search(ex):
                v.errors.append(f"no_match example matches: {ex[:120]!r}")
    except ValidationError as exc:
        v.errors.append("not a valid rule: " + "; ".join(f"{'.'.join(map(str, e['loc']))}: {error_message(e)}"
                                                          for e in exc.errors()))
    v.ok = not v.errors
    return v

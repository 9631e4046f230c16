"""Proposed rules: validated when proposed (compiles, matches its evidence, does not duplicate
an active rule), then approved or rejected by a human. Approval appends the rule to
`<rules_dir>/<family>.yaml` after the whole resulting library loaded from a temporary copy
(`app.rules_review.rulefiles`); the caller then swaps the running pipeline to the new rule set."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import yaml
from sqlalchemy import select
from sqlalchemy.orm import Session

from app.core.rules import RuleError, RuleSet, compile_pattern
from app.core.types import Category, ErrorType, default_category
from app.db.base import utcnow
from app.db.lookup import get_or_404
from app.errors import Conflict, NotFound
from app.rules_review.models import ProposalStatus, ProposedRule, RuleKind
from app.rules_review.rulefiles import append_rule
from app.rules_review.schemas import (
    ProposedRuleCreate,
    ProposedRuleOut,
    RuleOut,
    RuleSetOut,
)


def validate_rule(*, pattern: str, evidence: list[str], ruleset: RuleSet) -> dict:
    try:
        compiled = compile_pattern(pattern, where="proposed rule")
    except RuleError as exc:
        return {"valid": False, "compiles": False, "error": str(exc), "matched": [], "unmatched": evidence,
                "overlaps": []}
    matched, unmatched = [], []
    for line in evidence:
        try:
            hit = compiled.search(line, timeout=1.0)
        except TimeoutError:
            hit = None
        (matched if hit else unmatched).append(line)
    overlaps = sorted({r.id for r in ruleset.diagnosis for line in evidence
                       if r.regex.search(line, timeout=1.0)})
    return {"valid": not unmatched, "compiles": True, "matched": matched, "unmatched": unmatched,
            "overlaps": overlaps}


def _slug(error_type: str, rule_id: int) -> str:
    return f"proposed-{re.sub(r'[^a-z0-9]+', '-', error_type.lower()).strip('-')}-{rule_id}"


def rule_for(row: ProposedRule) -> dict[str, Any]:
    """The rule as it goes into rules/<family>.yaml (rows proposed before 0002 have no `rule`)."""
    if row.rule:
        return dict(row.rule)
    return {"id": _slug(row.error_type or "rule", row.id), "error_type": row.error_type,
            **({"category": row.category} if row.category else {}), "pattern": row.pattern,
            **({"hint": row.hint} if row.hint else {}), "examples": {"match": list(row.evidence)}}


def to_out(row: ProposedRule) -> ProposedRuleOut:
    snippet = yaml.safe_dump([rule_for(row)], sort_keys=False, allow_unicode=True)
    return ProposedRuleOut(
        id=row.id, kind=row.kind, family=row.family, pattern=row.pattern, error_type=row.error_type,
        category=row.category, evidence=list(row.evidence), hint=row.hint,
        source_diagnosis_id=row.source_diagnosis_id, status=row.status, validation=row.validation,
        proposed_by=row.proposed_by, reviewed_by=row.reviewed_by, reviewed_at=row.reviewed_at,
        review_note=row.review_note, created_at=row.created_at, rule=rule_for(row), yaml=snippet)


def propose_rule(*, session: Session, data: ProposedRuleCreate, proposed_by: str,
                 ruleset: RuleSet) -> ProposedRule:
    if data.source_diagnosis_id is not None:
        from app.diagnoses.service import get_diagnosis

        get_diagnosis(session=session, diagnosis_id=data.source_diagnosis_id)
    category = data.category or default_category(ErrorType(data.error_type))
    row = ProposedRule(
        kind=RuleKind.DIAGNOSIS.value, family=data.family,
        pattern=data.pattern, error_type=data.error_type.value, category=Category(category).value,
        evidence=list(data.evidence), hint=data.hint, source_diagnosis_id=data.source_diagnosis_id,
        status=ProposalStatus.PROPOSED.value, proposed_by=proposed_by,
        validation=validate_rule(pattern=data.pattern, evidence=list(data.evidence), ruleset=ruleset))
    session.add(row)
    session.flush()
    row.rule = rule_for(row)
    session.flush()
    return row


def get_proposed(*, session: Session, rule_id: int) -> ProposedRule:
    return get_or_404(session, ProposedRule, rule_id, what="proposed rule", detail_key="rule_id")


def list_proposed(*, session: Session, status: ProposalStatus | None) -> list[ProposedRule]:
    query = select(ProposedRule).order_by(ProposedRule.id.desc())
    if status is not None:
        query = query.where(ProposedRule.status == status.value)
    return list(session.scalars(query))


def review_rule(*, session: Session, rule_id: int, approve: bool, reviewer: str, note: str | None,
                rules_dir: Path | None = None) -> tuple[ProposedRule, RuleSet | None]:
    """Approve or reject a proposal. Approving writes the rule into `rules_dir` (validated on a
    temporary copy first; a rule that breaks loading is refused with 422 and nothing is written)
    and returns the new rule set for the caller to activate; rejecting returns None. Callers hold
    `rulefiles.rules_write_lock` while approving."""
    row = session.get(ProposedRule, rule_id, with_for_update=True)
    if row is None:
        raise NotFound(f"proposed rule {rule_id} does not exist", detail={"rule_id": rule_id})
    if row.status != ProposalStatus.PROPOSED.value:
        raise Conflict(f"proposed rule {rule_id} is already {row.status}", detail={"status": row.status})
    if approve and not row.validation.get("valid"):
        raise Conflict("a rule that failed validation cannot be approved",
                       detail={"validation": row.validation}, code="invalid_rule")
    ruleset = None
    if approve:
        if rules_dir is None:
            raise Conflict("no rules directory to write approved rules to", code="rules_dir_missing")
        ruleset, _ = append_rule(rules_dir=rules_dir, kind=row.kind, family=row.family, rule=rule_for(row))
    row.status = (ProposalStatus.APPROVED if approve else ProposalStatus.REJECTED).value
    row.reviewed_by = reviewer
    row.reviewed_at = utcnow()
    row.review_note = note
    session.flush()
    return row, ruleset


def active_rules(*, ruleset: RuleSet) -> RuleSetOut:
    rules = [RuleOut(id=r.id, kind="diagnosis", source=r.source, pattern=r.spec.pattern,
                     error_type=r.spec.error_type.value, category=r.category.value,
                     role=r.spec.role.value, hint=r.spec.hint) for r in ruleset.diagnosis]
    rules += [RuleOut(id=r.id, kind="filter", source=r.source, pattern=r.spec.pattern,
                      filter=r.spec.filter.value, hint=r.spec.hint) for r in ruleset.filters]
    return RuleSetOut(version=ruleset.version, files=list(ruleset.files), rules=rules)


def rule_hits(*, session: Session) -> dict[str, tuple[int, Any]]:
    """Per rule id: (diagnoses whose root cause it found, when the newest of them finished)."""
    from sqlalchemy import func

    from app.diagnoses.models import DiagnosisRow

    query = (select(DiagnosisRow.rule_id, func.count(DiagnosisRow.id), func.max(DiagnosisRow.finished_at))
             .where(DiagnosisRow.rule_id.is_not(None)).group_by(DiagnosisRow.rule_id))
    return {rule_id: (count, last) for rule_id, count, last in session.execute(query)}


TRY_MAX_LINES = 100_000


def try_rule(*, pattern: str, text: str, limit: int = 50) -> dict:
    """Run a pattern over pasted log text: which lines it matches (first `limit`), how many."""
    try:
        compiled = compile_pattern(pattern, where="proposed rule")
    except RuleError as exc:
        return {"compiles": False, "error": str(exc), "matches": [], "count": 0, "lines": 0}
    matches: list[tuple[int, str]] = []
    count = lines = 0
    for lines, line in enumerate(text.splitlines()[:TRY_MAX_LINES], start=1):
        try:
            hit = compiled.search(line, timeout=0.5)
        except TimeoutError:
            hit = None
        if hit:
            count += 1
            if len(matches) < limit:
                matches.append((lines, line[:500]))
    return {"compiles": True, "error": None, "matches": matches, "count": count, "lines": lines}

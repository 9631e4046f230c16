"""Proposed rules: validated when proposed (compiles, matches its evidence, does not duplicate
an active rule), then approved or rejected by a human. Approval appends the rule to
`<rules_dir>/<family>.yaml` after the whole resulting library loaded from a temporary copy
(`app.rules_review.rulefiles`); the caller then swaps the running pipeline to the new rule set."""

from __future__ import annotations

import asyncio
import re
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from functools import partial
from pathlib import Path
from typing import Any, TypeVar

import yaml
from sqlalchemy import select
from sqlalchemy.orm import Session

from app.core.rules import RuleSet
from app.core.types import Category, ErrorType, default_category
from app.core.untrusted import PatternRefused, benign_lines, check_work, compile_untrusted
from app.db.base import utcnow
from app.db.lookup import get_or_404
from app.errors import Conflict, InvalidInput, NotFound, ServiceUnavailable
from app.rules_review.models import ProposalStatus, ProposedRule, RuleKind
from app.rules_review.rulefiles import append_rule
from app.rules_review.schemas import (
    ProposedRuleCreate,
    ProposedRuleOut,
    RuleOut,
    RuleSetOut,
)

T = TypeVar("T")


def validate_rule(*, pattern: str, evidence: list[str], ruleset: RuleSet, no_match: Sequence[str] = ()) -> dict:
    """The checks a proposed diagnosis rule passes before it can be approved, all run in RE2
    (`app.core.untrusted`, so none can backtrack): it compiles in RE2 and `regex`, is no
    repetition of repetitions and needs enough literal text (else `PatternRefused`); then it
    matches every evidence line, none of its `no_match` examples and no metric or normal
    training line (`benign_lines`). `errors` lists what failed; `overlaps` names the active
    rules that already match the evidence."""
    compiled = compile_untrusted(pattern)
    benign = benign_lines()
    check_work(compiled, sum(map(len, evidence)) + sum(map(len, no_match)) + sum(map(len, benign)))
    matched, unmatched = [], []
    for line in evidence:
        (matched if compiled.search(line) else unmatched).append(line)
    wrong = compiled.matching(no_match)
    benign_hits = compiled.matching(benign)
    errors = []
    if unmatched:
        errors.append(f"misses {len(unmatched)} evidence line(s), e.g. {unmatched[0][:160]!r}")
    if wrong:
        errors.append(f"matches {len(wrong)} no_match example(s), e.g. {wrong[0][:160]!r}")
    if benign_hits:
        errors.append(f"matches {len(benign_hits)} metric or normal training line(s), e.g. {benign_hits[0][:160]!r}")
    library = ruleset.matchers()[1]
    overlaps = sorted({library.rules[i].id for line in evidence for i in library.match_indices(line)})
    return {"valid": not errors, "compiles": True, "engine": "re2", "errors": errors, "matched": matched,
            "unmatched": unmatched, "no_match_matched": wrong[:5], "benign_matched": benign_hits[:5],
            "benign_total": len(benign), "overlaps": overlaps}


_POOL = ThreadPoolExecutor(max_workers=2, thread_name_prefix="untrusted-pattern")
_MAX_WAITING = 32
_waiting = 0


async def run_untrusted(fn: Callable[..., T], /, **kwargs) -> T:
    """Run work on an engineer's or a model's pattern in its own two threads: requests that try
    patterns wait there, never in the server's shared thread pool, so however many arrive the
    diagnoses and the rest of the API keep their threads (RE2 holds the GIL while it searches;
    `check_work` keeps each search short, so other threads get it back between lines)."""
    global _waiting
    if _waiting >= _MAX_WAITING:
        raise ServiceUnavailable("too many pattern checks are waiting; retry shortly", code="busy",
                                 detail={"waiting": _waiting})
    _waiting += 1
    try:
        return await asyncio.get_running_loop().run_in_executor(_POOL, partial(fn, **kwargs))
    finally:
        _waiting -= 1


def refused(exc: PatternRefused, pattern: str) -> InvalidInput:
    return InvalidInput(f"pattern refused: {exc.reason}", code=exc.code, detail={"pattern": pattern[:200]})


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
                 ruleset: RuleSet, validation: dict | None = None) -> ProposedRule:
    """Store a proposal with its `validation` (computed here when not given: the API computes it
    first, in `run_untrusted`). A pattern that cannot be run safely raises 422 and nothing is stored."""
    if validation is None:
        try:
            validation = validate_rule(pattern=data.pattern, evidence=list(data.evidence), ruleset=ruleset)
        except PatternRefused as exc:
            raise refused(exc, data.pattern) from None
    if data.source_diagnosis_id is not None:
        from app.diagnoses.service import get_diagnosis

        get_diagnosis(session=session, diagnosis_id=data.source_diagnosis_id)
    category = data.category or default_category(ErrorType(data.error_type))
    row = ProposedRule(
        kind=RuleKind.DIAGNOSIS.value, family=data.family,
        pattern=data.pattern, error_type=data.error_type.value, category=Category(category).value,
        evidence=list(data.evidence), hint=data.hint, source_diagnosis_id=data.source_diagnosis_id,
        status=ProposalStatus.PROPOSED.value, proposed_by=proposed_by,
        validation=validation)
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
    """Run a pattern over pasted log text in RE2: which lines it matches (first `limit`), how
    many. A pattern RE2 cannot run, or too much text for its length, is reported, not run."""
    try:
        compiled = compile_untrusted(pattern)
        lines_in = text.splitlines()[:TRY_MAX_LINES]
        check_work(compiled, sum(map(len, lines_in)))
    except PatternRefused as exc:
        return {"compiles": False, "error": exc.reason, "code": exc.code, "matches": [], "count": 0, "lines": 0}
    matches: list[tuple[int, str]] = []
    count = lines = 0
    for lines, line in enumerate(lines_in, start=1):
        if compiled.search(line):
            count += 1
            if len(matches) < limit:
                matches.append((lines, line[:500]))
    return {"compiles": True, "error": None, "matches": matches, "count": count, "lines": lines}

"""The database-backed `ProposedRuleSink` (app.llm.ports): the rule writers' proposals become
`proposed_rules` rows (status `proposed`) that engineers review in the API."""

from __future__ import annotations

from sqlalchemy import select, text
from sqlalchemy.orm import Session

from app.db.engine import Database
from app.diagnoses.models import DiagnosisRow
from app.llm.ports import ProposedRule
from app.rules_review.models import ProposalStatus, RuleKind
from app.rules_review.models import ProposedRule as ProposedRuleRow

_PROPOSE_LOCK = 0x6C6F6770  # pg advisory lock: two workers proposing the same pattern insert once


def store_proposal(*, session: Session, rule: ProposedRule) -> ProposedRuleRow:
    """The existing row for the same (kind, pattern), or a new `proposed` row."""
    kind = RuleKind(rule.kind).value
    if session.get_bind().dialect.name == "postgresql":
        session.execute(text("SELECT pg_advisory_xact_lock(:k)"), {"k": _PROPOSE_LOCK})
    existing = session.scalar(select(ProposedRuleRow).where(
        ProposedRuleRow.kind == kind, ProposedRuleRow.pattern == rule.pattern).order_by(ProposedRuleRow.id).limit(1))
    if existing is not None:
        return existing
    source = None
    if rule.source_diagnosis_id is not None and str(rule.source_diagnosis_id).isdigit():
        candidate = int(rule.source_diagnosis_id)
        if session.get(DiagnosisRow, candidate) is not None:
            source = candidate
    chosen = (rule.validation or {}).get("chosen") or {}
    validation = {"valid": bool(chosen.get("ok", True)), "compiles": True,
                  "matched": list(rule.evidence), "unmatched": [], "overlaps": [], **(rule.validation or {})}
    row = ProposedRuleRow(
        kind=kind, family=rule.family, rule=dict(rule.rule), pattern=rule.pattern,
        error_type=rule.rule.get("error_type"), category=rule.rule.get("category"),
        evidence=list(rule.evidence), hint=rule.rule.get("hint"), source_diagnosis_id=source,
        status=ProposalStatus.PROPOSED.value, validation=validation, proposed_by=rule.proposed_by[:128])
    session.add(row)
    session.flush()
    return row


class DbProposedRuleSink:
    def __init__(self, db: Database) -> None:
        self.db = db

    def propose(self, rule: ProposedRule) -> str:
        return str(self.db.run(lambda session: store_proposal(session=session, rule=rule).id))

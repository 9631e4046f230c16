from __future__ import annotations

from fastapi import APIRouter

from app.api.deps import Admin, Engineer, ServicesDep
from app.api.openapi import ERRORS
from app.core.untrusted import PatternRefused
from app.rules_review import service
from app.rules_review.models import ProposalStatus
from app.rules_review.rulefiles import rules_write_lock
from app.rules_review.schemas import ProposedRuleCreate, ProposedRuleList, ProposedRuleOut, Review, RuleSetOut
from app.schemas_common import ObjectId

router = APIRouter(prefix="/v1/rules", tags=["rules"], responses=ERRORS)


@router.get("", response_model=RuleSetOut)
def list_rules(services: ServicesDep, _: Engineer) -> RuleSetOut:
    """Active diagnosis and filter rules, as compiled at start-up."""
    return service.active_rules(ruleset=services.pipeline.ruleset)


@router.get("/proposed", response_model=ProposedRuleList)
def list_proposed(services: ServicesDep, _: Engineer, status: ProposalStatus | None = None) -> ProposedRuleList:
    with services.db.transaction() as session:
        return ProposedRuleList(items=[service.to_out(r) for r in
                                       service.list_proposed(session=session, status=status)])


_REFUSED = {422: ERRORS[422] | {"description": "The pattern is refused before anything runs it: `pattern_not_re2` "
                                               "(a construct RE2 cannot run), `pattern_backtracks`, "
                                               "`pattern_too_broad`, `invalid_pattern`, `too_much_work`"}}


def _store(*, session, body: ProposedRuleCreate, who: str, ruleset, validation: dict) -> ProposedRuleOut:  # noqa: ANN001
    return service.to_out(service.propose_rule(session=session, data=body, proposed_by=who, ruleset=ruleset,
                                               validation=validation))


@router.post("/proposed", status_code=201, response_model=ProposedRuleOut, responses=_REFUSED)
async def propose_rule(body: ProposedRuleCreate, services: ServicesDep, who: Engineer) -> ProposedRuleOut:
    """Propose a diagnosis rule; it is validated at once, in RE2 (linear time: no pattern can
    backtrack). Refused with 422 when the pattern cannot be run safely (RE2 cannot express it,
    a repetition of repetitions, too little literal text, e.g. `0` or `.*`); stored with
    `validation.valid` false and `validation.errors` when it misses its evidence or matches a
    metric or normal training line (approval is then refused)."""
    ruleset = services.pipeline.ruleset
    try:
        validation = await service.run_untrusted(service.validate_rule, pattern=body.pattern,
                                                 evidence=list(body.evidence), ruleset=ruleset)
    except PatternRefused as exc:
        raise service.refused(exc, body.pattern) from None
    return await services.run_db(_store, body=body, who=who.name, ruleset=ruleset, validation=validation)


@router.get("/proposed/{rule_id}", response_model=ProposedRuleOut)
def get_proposed(rule_id: ObjectId, services: ServicesDep, _: Engineer) -> ProposedRuleOut:
    with services.db.transaction() as session:
        return service.to_out(service.get_proposed(session=session, rule_id=rule_id))


def _review(services, rule_id: int, approve: bool, who, body: Review | None) -> ProposedRuleOut:  # noqa: ANN001
    note = body.note if body else None
    if not approve:
        with services.db.transaction() as session:
            row, _ = service.review_rule(session=session, rule_id=rule_id, approve=False, reviewer=who.name,
                                         note=note)
            return service.to_out(row)
    with rules_write_lock(services.rules_lock_path):
        with services.db.transaction() as session:
            row, ruleset = service.review_rule(session=session, rule_id=rule_id, approve=True, reviewer=who.name,
                                               note=note, rules_dir=services.settings.effective_rules_dir)
            out = service.to_out(row)
        # committed: from now on diagnoses use the library with the new rule (its version changed)
        services.activate_rules(ruleset)
    return out


_ALREADY_REVIEWED = {409: ERRORS[404] | {"description": "The proposal was already approved or rejected"}}


@router.post("/proposed/{rule_id}/approve", response_model=ProposedRuleOut, responses=_ALREADY_REVIEWED)
def approve(rule_id: ObjectId, services: ServicesDep, who: Admin, body: Review | None = None) -> ProposedRuleOut:
    """Approve: the rule is appended to rules/<family>.yaml (after the whole library with it
    loaded from a temporary copy: 422 `invalid_rule` and nothing written otherwise), and the
    running service diagnoses with the new rule set at once."""
    return _review(services, rule_id, True, who, body)


@router.post("/proposed/{rule_id}/reject", response_model=ProposedRuleOut, responses=_ALREADY_REVIEWED)
def reject(rule_id: ObjectId, services: ServicesDep, who: Admin, body: Review | None = None) -> ProposedRuleOut:
    return _review(services, rule_id, False, who, body)

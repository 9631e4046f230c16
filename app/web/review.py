"""Sign-in/out and the rules page (active rules with hits, proposed rules to review)."""

from __future__ import annotations

import secrets
from dataclasses import dataclass
from functools import partial
from typing import Annotated

import anyio

from fastapi import APIRouter, Form, Request
from fastapi.responses import HTMLResponse, RedirectResponse, Response

from app.api.deps import ServicesDep
from app.auth.models import TokenRole
from app.core.types import ErrorType, default_category
from app.errors import Conflict, InvalidInput
from app.relabel.router import impact_report
from app.auth.sessions import SESSION_HOURS, end_session, start_session
from app.rules_review import service as rules
from app.rules_review.models import ProposalStatus
from app.rules_review.rulefiles import rules_write_lock
from app.schemas_common import ObjectId
from app.web.auth import LOGIN_CSRF_COOKIE, PREFIX, SESSION_COOKIE, WebAdmin, WebEngineer, same_token
from app.web.render import opt, page

router = APIRouter(prefix=PREFIX, include_in_schema=False)


def _safe_next(value: str | None) -> str:
    """Only a path inside the UI: never an open redirect to another site."""
    if value and value.startswith(PREFIX + "/") and not value.startswith("//") and "\\" not in value:
        return value
    return PREFIX + "/"


def _login_form(request: Request, *, error: str | None = None, status_code: int = 200) -> HTMLResponse:
    token = secrets.token_urlsafe(24)
    response = page(request, "login.html", status_code=status_code, login_csrf=token, error=error,
                    next=_safe_next(request.query_params.get("next")))
    response.set_cookie(LOGIN_CSRF_COOKIE, token, httponly=True, samesite="strict", path=PREFIX,
                        secure=request.url.scheme == "https")
    return response


@router.get("/login", response_class=HTMLResponse)
def login_form(request: Request) -> HTMLResponse:
    return _login_form(request)


@router.post("/login")
def login(request: Request, services: ServicesDep, token: Annotated[str, Form(max_length=512)],
          csrf: Annotated[str, Form(max_length=128)], next: Annotated[str | None, Form()] = None) -> Response:  # noqa: A002
    if not same_token(request.cookies.get(LOGIN_CSRF_COOKIE), csrf):
        return _login_form(request, error="The sign-in form expired; please try again.", status_code=403)
    started = services.db.run(start_session, token=token)
    if started is None:
        return _login_form(request, error="Unknown or revoked token.", status_code=401)
    cookie, user = started
    if not user.principal.allows(TokenRole.ENGINEER):
        services.db.run(end_session, cookie=cookie)
        return _login_form(request, status_code=403,
                           error=f"A {user.principal.role.value} token cannot use these pages; "
                                 "sign in with an engineer or admin token.")
    response = RedirectResponse(_safe_next(next), status_code=303)
    response.set_cookie(SESSION_COOKIE, cookie, httponly=True, samesite="lax", path="/",
                        max_age=SESSION_HOURS * 3600, secure=request.url.scheme == "https")
    response.delete_cookie(LOGIN_CSRF_COOKIE, path=PREFIX)
    return response


@router.post("/logout")
def logout(request: Request, services: ServicesDep, _: WebEngineer) -> RedirectResponse:
    services.db.run(end_session, cookie=request.cookies[SESSION_COOKIE])
    response = RedirectResponse(f"{PREFIX}/login?signed_out=1", status_code=303)
    response.delete_cookie(SESSION_COOKIE, path="/")
    return response


# A rule that changes more than this share of the sampled stored diagnoses (or changes what the
# controller would do with any of them) is approved only after an explicit confirmation.
BROAD_SHARE = 0.05
IMPACT_SAMPLE = 200
IMPACT_EXAMPLES = 5


@dataclass(frozen=True)
class Impact:
    """What approving a proposal would change among the newest stored diagnoses."""

    tried: int  # stored logs diagnosed both ways
    changed: int
    action_changes: int  # changed logs whose category (restart, drain, stop) changes too
    examples: list  # ChangedLog, the first few
    error: str | None = None

    @property
    def broad(self) -> bool:
        return self.error is None and (self.action_changes > 0 or self.changed > BROAD_SHARE * self.tried)


def _category(error_type: str | None) -> str | None:
    try:
        return default_category(ErrorType(error_type)).value if error_type else None
    except ValueError:
        return None


def review_impact(services, rule_id: int) -> Impact:  # noqa: ANN001
    try:
        report = impact_report(services, rule_id, IMPACT_SAMPLE)
    except InvalidInput as exc:
        return Impact(tried=0, changed=0, action_changes=0, examples=[], error=str(exc))
    action = [c for c in report.changed_logs if _category(c.old_error_type) != _category(c.new_error_type)]
    # the examples that change the action first: they are the ones a reviewer must see
    examples = (action + [c for c in report.changed_logs if c not in action])[:IMPACT_EXAMPLES]
    return Impact(tried=report.done, changed=report.changed, action_changes=len(action), examples=examples)


def _rules_page(request: Request, services, *, tried: dict | None = None, tried_id: int | None = None,  # noqa: ANN001
                tried_text: str = "", refused: tuple[int, str] | None = None, status_code: int = 200) -> HTMLResponse:
    ruleset = services.pipeline.ruleset
    with services.db.transaction() as session:
        hits = rules.rule_hits(session=session)
        proposed = [rules.to_out(r) for r in rules.list_proposed(session=session, status=None)]
    active = rules.active_rules(ruleset=ruleset)
    pending = [p for p in proposed if p.status == ProposalStatus.PROPOSED.value]
    impacts = {p.id: review_impact(services, p.id) for p in pending if p.kind == "diagnosis"}
    diagnosis_rules = sorted((r for r in active.rules if r.kind == "diagnosis"),
                             key=lambda r: (-(hits.get(r.id, (0, None))[0]), r.id))
    return page(request, "rules.html", status_code=status_code, rules_version=active.version, impacts=impacts,
                refused=refused, rules=diagnosis_rules,
                filters=[r for r in active.rules if r.kind == "filter"], hits=hits,
                pending=pending,
                reviewed=[p for p in proposed if p.status != ProposalStatus.PROPOSED.value][:20],
                tried=tried, tried_id=tried_id, tried_text=tried_text,
                can_review=request.state.principal.allows(TokenRole.ADMIN))


@router.get("/rules", response_class=HTMLResponse)
def rules_page(request: Request, services: ServicesDep, _: WebEngineer) -> HTMLResponse:
    return _rules_page(request, services)


@router.post("/rules/proposed/{rule_id}/try", response_class=HTMLResponse)
async def try_rule(request: Request, rule_id: ObjectId, services: ServicesDep, _: WebEngineer,
                   text: Annotated[str, Form(max_length=500_000)]) -> HTMLResponse:
    """Run the proposed pattern over a pasted log in RE2 (nothing is stored), in the pattern
    threads (`rules.run_untrusted`), not the server's shared ones."""
    pattern = await services.run_db(lambda session: rules.get_proposed(session=session, rule_id=rule_id).pattern)
    result = await rules.run_untrusted(rules.try_rule, pattern=pattern, text=text)
    return await anyio.to_thread.run_sync(partial(_rules_page, request, services, tried=result, tried_id=rule_id,
                                                  tried_text=text))


def _review(rule_id: int, approve: bool, services, user, note: str | None) -> RedirectResponse:  # noqa: ANN001
    """Approve or reject, exactly as `POST /v1/rules/proposed/{id}/approve|reject` does (the
    confirmation of a broad change is checked by the caller)."""
    if not approve:
        with services.db.transaction() as session:
            rules.review_rule(session=session, rule_id=rule_id, approve=False, reviewer=user.principal.name,
                              note=opt(note))
        return RedirectResponse(f"{PREFIX}/rules#p-{rule_id}", status_code=303)
    with rules_write_lock(services.rules_lock_path):
        with services.db.transaction() as session:
            row, ruleset = rules.review_rule(session=session, rule_id=rule_id, approve=True,
                                             reviewer=user.principal.name, note=opt(note),
                                             rules_dir=services.settings.effective_rules_dir)
            new_id = rules.rule_for(row)["id"]
        # committed: from now on diagnoses use the library with the new rule
        services.activate_rules(ruleset)
    return RedirectResponse(f"{PREFIX}/rules?approved={new_id}#r-{new_id}", status_code=303)


@router.post("/rules/proposed/{rule_id}/approve")
def approve(request: Request, rule_id: ObjectId, services: ServicesDep, user: WebAdmin,
            note: Annotated[str | None, Form(max_length=10_000)] = None,
            confirm_changed: Annotated[int | None, Form(ge=0, le=1_000_000)] = None) -> Response:
    """A broad change needs `confirm_changed` equal to the number of diagnoses it changes now:
    a confirmation given for a smaller impact (the stored logs moved on) does not count."""
    with services.db.transaction() as session:
        kind = rules.get_proposed(session=session, rule_id=rule_id).kind
    impact = review_impact(services, rule_id) if kind == "diagnosis" else None
    if impact is not None and impact.broad and confirm_changed != impact.changed:
        why = (f"Not approved: this rule changes {impact.changed} of the {impact.tried} newest stored diagnoses"
               + (f", {impact.action_changes} of them to another action" if impact.action_changes else "")
               + f". Tick 'I have reviewed the {impact.changed} changed diagnoses' to approve it.")
        return _rules_page(request, services, refused=(rule_id, why), status_code=Conflict.status_code)
    return _review(rule_id, True, services, user, note)


@router.post("/rules/proposed/{rule_id}/reject")
def reject(rule_id: ObjectId, services: ServicesDep, user: WebAdmin,
           note: Annotated[str | None, Form(max_length=10_000)] = None) -> RedirectResponse:
    return _review(rule_id, False, services, user, note)

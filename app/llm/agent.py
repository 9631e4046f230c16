"""The failure agent: when ranking is unsure (or nothing matched), ask the LLM to pick the root
cause among the rule-detected candidates, validate the answer, and fall back to a retrieval vote
and then to the rules' own answer. No LLM failure ever fails a diagnosis.

Two modes, chosen by the backend:
- json (hosted models): the model returns {choice, error_type, category, action, confidence,
  explanation, evidence_lines}; every field is validated, cited lines must exist in the log.
- choice (local scoring models): each candidate's letter is scored by log-likelihood in two
  candidate orders, divided by a content-free run of the same prompt (contextual calibration
  against letter/position bias), and normalised: the confidence is that calibrated softmax.
"""

from __future__ import annotations

import string
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from app.core.policy import PolicyContext, decide
from app.core.types import (
    Action, ActionKind, Category, CoOccurring, DecidedBy, Diagnosis, ErrorType, Evidence, RootCause,
    default_category,
)
from app.llm.budget import fit_log, line_texts
from app.llm.client import LLMClient
from app.llm.errors import LLMError
from app.llm.ports import SimilarCase
from app.llm.prompts import PromptTemplate, load_prompt
from app.llm.retrieval import Retriever, RetrievalVote, vote

OTHER = "other"
_SELECTABLE_TYPES = [t.value for t in ErrorType if t is not ErrorType.ChildFailedError]


@dataclass
class AgentConfig:
    trigger_below: float = 0.8  # ranking confidence under which the agent is consulted (Settings.llm_trigger_below)
    # LLM confidence needed before its answer (a fault) replaces the rules' one. Prompt v3 asks for
    # 0.7 or more when the log itself shows the cause; its answers at 0.6-0.7 were right more often
    # than the rules' on 346 development cases, with no false alarm added (docs/LLM.md)
    accept_at: float = 0.6
    accept_at_scoring: float = 0.9  # same, for local scoring models (small, weakly calibrated)
    retrieval_accept_at: float = 0.6
    max_candidates: int = 12
    max_log_tokens: int = 3000
    reserve_tokens: int = 700  # instructions, candidates, similar cases and the answer
    similar_k: int = 5
    two_orders: bool = True  # choice mode: average over the given and the reversed order
    # an answer that the log shows no failure (Unknown) leads to `investigate`, the action that
    # acts on nothing: it needs less confidence than one that names a fault the controller acts on
    accept_unknown_at: float = 0.4


@dataclass(frozen=True)
class Candidate:
    id: str  # event id ("e3") or "type:<ErrorType>" for retrieval-proposed types
    error_type: ErrorType
    category: Category
    line: int | None
    text: str
    role: str
    count: int
    event: Any = None


@dataclass
class AgentVerdict:
    choice: str
    error_type: ErrorType
    category: Category
    action: ActionKind | None
    confidence: float
    explanation: str
    evidence_lines: list[int]
    accepted: bool
    reason: str
    prompt_ref: str
    model: str
    mode: str
    probabilities: dict[str, float] = field(default_factory=dict)
    raw: dict[str, Any] = field(default_factory=dict)  # what the LLM said (after unmasking)

    def to_json_dict(self) -> dict[str, Any]:
        return {"choice": self.choice, "error_type": self.error_type.value, "category": self.category.value,
                "action": self.action.value if self.action else None, "confidence": self.confidence,
                "explanation": self.explanation, "evidence_lines": self.evidence_lines,
                "accepted": self.accepted, "reason": self.reason, "prompt": self.prompt_ref,
                "model": self.model, "mode": self.mode, "probabilities": self.probabilities, "raw": self.raw}


@dataclass
class Refinement:
    diagnosis: Diagnosis
    verdict: AgentVerdict | None = None
    retrieval: RetrievalVote | None = None
    similar: list[SimilarCase] = field(default_factory=list)
    consulted: bool = False  # false when ranking was confident enough to skip the agent


class _JSONAnswer(BaseModel):
    model_config = ConfigDict(extra="ignore")
    choice: str
    error_type: ErrorType
    category: Category
    action: ActionKind
    confidence: float = Field(ge=0, le=1)
    explanation: str = Field(max_length=4000)
    evidence_lines: list[int] = Field(default_factory=list, max_length=50)


def _val(x: Any) -> str:
    return str(getattr(x, "value", x))


class FailureAgent:
    def __init__(self, client: LLMClient, *, retriever: Retriever | None = None, policies: Sequence = (),
                 config: AgentConfig | None = None, json_prompt: PromptTemplate | None = None,
                 choice_prompt: PromptTemplate | None = None, rule_sink: Any = None,
                 rule_writer: Any = None, examples: Any = None) -> None:
        self.client = client
        # the rule library's match examples (app.llm.examples.ExampleIndex): candidates and a
        # fallback vote for logs where no rule matched
        self.examples = examples
        # a confident answer the rules could not give (`other`, or a generic/Unknown event) yields
        # a proposed diagnosis rule, validated before it reaches the sink (ProposedRuleSink)
        self.rule_sink = rule_sink
        self.rule_writer = rule_writer
        self.retriever = retriever
        self.policies = list(policies)
        self.config = config or AgentConfig()
        self.json_prompt = json_prompt or load_prompt("root_cause")
        self.choice_prompt = choice_prompt or load_prompt("root_cause_choice")

    # -- when ---------------------------------------------------------------------------------
    def should_consult(self, result: Any) -> bool:
        rc = result.diagnosis.root_cause
        return rc.confidence < self.config.trigger_below or rc.error_type is ErrorType.Unknown

    # -- the decision -------------------------------------------------------------------------
    def candidates(self, result: Any, similar: Sequence[SimilarCase] = ()) -> list[Candidate]:
        events = sorted(getattr(result, "events", []) or [], key=lambda e: e.first_line)
        out = [Candidate(e.id, ErrorType(_val(e.error_type)), Category(_val(e.category)), e.first_line,
                         e.text, _val(e.role), e.count, e) for e in events[: self.config.max_candidates]]
        if all(c.error_type is ErrorType.Unknown or c.role == "symptom" for c in out):
            # no rule explains the failure: the nearest rule examples of the most error-looking
            # unexplained lines, then similar past cases, propose the types to choose among
            out.extend(self._example_candidates(result))
        if not out:
            seen: set[str] = set()
            for s in similar:
                t = s.case.error_type.value
                if t not in seen:
                    seen.add(t)
                    out.append(Candidate(f"type:{t}", s.case.error_type, s.case.category, None,
                                         s.case.evidence or "", "cause", 0))
        return out

    def _error_lines(self, result: Any) -> list[tuple[int, str]]:
        """The most error-looking lines no specific rule explained: those of catch-all (Unknown)
        events and the compressor's flagged lines, but not the ones the run went on after (more
        training, a completion marker) or printed at teardown: the rules' ranking does not take
        them for the failure (app/core/rank.py), and a resemblance to an example must not either."""
        from app.core.rank import survived_before
        from app.llm.examples import error_looking_lines

        before = survived_before(result.compressed) if hasattr(result.compressed, "recent_progress") else 0
        harmless = getattr(result, "harmless", frozenset())
        # (an Unknown rule that prescribes its own action, a native crash's `investigate`, explains
        # its line: it knows the cause is not in the log)
        unexplained = [(e.first_line, e.text) for e in getattr(result, "events", []) or []
                       if _val(e.error_type) == ErrorType.Unknown.value and not getattr(e, "recovered", False)
                       and getattr(e, "action", None) is None]
        flagged = list(getattr(result.compressed, "flagged_lines", None) or [])
        lines = [(n, s) for n, s in unexplained + flagged if n >= before and n not in harmless]
        return error_looking_lines(sorted(lines))

    def _example_candidates(self, result: Any) -> list[Candidate]:
        if self.examples is None:
            return []
        out: list[Candidate] = []
        seen: set[tuple[int, str]] = set()
        for line, text in self._error_lines(result):
            for m in self.examples.candidate_types(text, max_types=3):
                key = (line, m.example.error_type.value)
                if key in seen:
                    continue
                seen.add(key)
                out.append(Candidate(f"x{len(out) + 1}", m.example.error_type, m.example.category, line, text,
                                     "cause", 1))
        return out[: self.config.max_candidates]

    def decide(self, result: Any, *, similar_cases: Sequence[SimilarCase] = (), job_context: str = "") -> AgentVerdict:
        """Ask the LLM; raises LLMError when it cannot answer (callers fall back)."""
        cands = self.candidates(result, similar_cases)
        if self.client.backend.supports_json:
            return self._decide_json(result, cands, similar_cases, job_context)
        if len(cands) < 2:
            raise LLMError("choice mode needs at least two candidates")
        return self._decide_choice(result, cands)

    def _log_budget(self, fixed_prompt_tokens: int) -> int:
        ctx = self.client.backend.context_tokens or 4096
        return max(200, min(self.config.max_log_tokens, ctx - self.config.reserve_tokens - fixed_prompt_tokens))

    def _fitted_log(self, result: Any, cands: list[Candidate], fixed: int) -> str:
        lines = [c.line for c in cands if c.line is not None]
        for c in cands:
            for occ in (getattr(c.event, "occurrences", None) or [])[:3]:
                lines.append(occ.line)
        text, _ = fit_log(result.compressed.text, self._log_budget(fixed), self.client.count_tokens,
                          evidence_lines=lines)
        return text

    def _hosts(self, result: Any) -> set[str]:
        hosts = set(getattr(result.compressed, "known_hosts", None) or ())
        for ev in getattr(result, "events", []) or []:
            hosts |= set(getattr(ev, "hosts", ()) or ())
        return hosts

    def _decide_json(self, result: Any, cands: list[Candidate], similar: Sequence[SimilarCase],
                     job_context: str) -> AgentVerdict:
        p = self.json_prompt
        cand_text = "\n".join(f"{c.id} | {c.error_type.value} | {c.role} | L{c.line} | ×{c.count} | {c.text[:300]}"
                              for c in cands) or "(none: no rule matched)"
        sim_text = "\n".join(
            f"- similarity {s.similarity:.2f}{' (human-confirmed)' if s.case.human_confirmed else ''}: "
            f"{s.case.error_type.value}/{s.case.category.value} -> {s.case.action.value}; "
            f"{(s.case.evidence or s.case.signature)[:200]}" for s in similar) or "(none)"
        values = dict(job_context=job_context or _job_context(result), candidates=cand_text,
                      similar_cases=sim_text, error_types=", ".join(_SELECTABLE_TYPES))
        fixed = self.client.count_tokens("".join(p.render(**values, log="")[i] or "" for i in (0, 1)))
        values["log"] = self._fitted_log(result, cands, fixed)
        system, user = p.render(**values)
        answer = self.client.complete_json(user, p.output_schema or {}, prompt_version=p.ref, system=system,
                                           known_hosts=self._hosts(result))
        try:
            parsed = _JSONAnswer.model_validate(answer.data)
        except ValidationError as exc:
            raise LLMError(f"LLM answer failed validation: {exc.errors()[0]['loc']}: {exc.errors()[0]['msg']}") from None
        by_id = {c.id: c for c in cands}
        existing = line_texts(result.compressed.text)
        cited = [ln for ln in parsed.evidence_lines if ln in existing]
        cited += [int(x) for x in _cited_in(parsed.explanation) if int(x) in existing and int(x) not in cited]
        accepted, reason = True, "confident answer"
        if parsed.choice != OTHER and parsed.choice not in by_id:
            accepted, reason = False, f"chose unknown candidate {parsed.choice!r}"
        chosen = by_id.get(parsed.choice)
        if chosen is not None and chosen.line is not None and chosen.line not in cited:
            cited.insert(0, chosen.line)
        if accepted and not cited:
            accepted, reason = False, "cites no line that exists in the log"
        need = self.config.accept_unknown_at if parsed.error_type is ErrorType.Unknown else self.config.accept_at
        if accepted and parsed.confidence < need:
            accepted, reason = False, f"confidence {parsed.confidence:.2f} < {need:.2f}"
        if parsed.error_type is ErrorType.ChildFailedError:
            accepted, reason = False, "a symptom-only type cannot be the root cause"
        return AgentVerdict(parsed.choice, parsed.error_type, parsed.category, parsed.action,
                            round(parsed.confidence, 3), parsed.explanation, cited[:10], accepted, reason,
                            p.ref, f"{self.client.backend.name}:{self.client.backend.model}", "json",
                            raw=answer.data)

    def _decide_choice(self, result: Any, cands: list[Candidate]) -> AgentVerdict:
        p = self.choice_prompt
        n = len(cands)
        letters = list(string.ascii_uppercase[:n])

        def listing(order: list[Candidate]) -> str:
            return "\n".join(f"{letters[i]}) line {c.line}: {c.error_type.value}: {c.text[:200]}"
                             if c.line is not None else f"{letters[i]}) {c.error_type.value}"
                             for i, c in enumerate(order))

        hosts = self._hosts(result)
        fixed = self.client.count_tokens("".join(p.render(candidates=listing(cands), log="")[i] or "" for i in (0, 1)))
        log = self._fitted_log(result, cands, fixed)
        cf_sys, cf_user = p.render(candidates="\n".join(f"{x}) N/A" for x in letters), log="N/A")
        prior = self.client.score_choices(cf_user, letters, prompt_version=p.ref, system=cf_sys).probs
        orders = [cands, list(reversed(cands))] if self.config.two_orders else [cands]
        totals = {c.id: 0.0 for c in cands}
        for order in orders:
            system, user = p.render(candidates=listing(order), log=log)
            probs = self.client.score_choices(user, letters, prompt_version=p.ref, system=system,
                                              known_hosts=hosts).probs
            cal = [probs[i] / max(prior[i], 1e-6) for i in range(n)]
            z = sum(cal) or 1.0
            for i, c in enumerate(order):
                totals[c.id] += cal[i] / z / len(orders)
        best_id = max(totals, key=lambda k: totals[k])
        best = next(c for c in cands if c.id == best_id)
        conf = round(totals[best_id], 3)
        accepted = conf >= self.config.accept_at_scoring
        reason = "confident answer" if accepted else f"confidence {conf:.2f} < {self.config.accept_at_scoring:.2f}"
        expl = (f"The local model ranks candidate {best.id} (line {best.line}: {best.error_type.value}) as the root "
                f"cause with calibrated probability {conf:.2f} among {n} candidates.")
        return AgentVerdict(best.id, best.error_type, best.category, None, conf, expl,
                            [best.line] if best.line is not None else [], accepted, reason, p.ref,
                            f"{self.client.backend.name}:{self.client.backend.model}", "choice",
                            probabilities={k: round(v, 4) for k, v in totals.items()})

    # -- refine: the pipeline's entry point ---------------------------------------------------
    def refine(self, result: Any, *, job_context: str = "", exclude_cases: frozenset[str] = frozenset()) -> Diagnosis:
        return self.review(result, job_context=job_context, exclude_cases=exclude_cases).diagnosis

    def review(self, result: Any, *, job_context: str = "", exclude_cases: frozenset[str] = frozenset()) -> Refinement:
        original: Diagnosis = result.diagnosis
        if not self.should_consult(result):
            return Refinement(original)
        notes: list[str] = []
        similar: list[SimilarCase] = []
        if self.retriever is not None:
            try:
                similar = self.retriever.similar(result, exclude=exclude_cases, k=self.config.similar_k)
            except Exception as exc:  # retrieval is an aid; never fail the diagnosis
                notes.append(f"retrieval failed: {type(exc).__name__}: {exc}")
        verdict: AgentVerdict | None = None
        if self.client.available:
            try:
                verdict = self.decide(result, similar_cases=similar, job_context=job_context)
            except LLMError as exc:
                notes.append(f"llm unavailable ({type(exc).__name__}: {exc}); kept the "
                             f"{'retrieval' if similar else 'rules'} result")
        if verdict is not None and verdict.accepted:
            diag = self._apply_verdict(result, verdict, notes)
            self._maybe_propose_rule(result, verdict, diag)
            return Refinement(diag, verdict, None, similar, True)
        if verdict is not None:
            notes.append(f"llm ({verdict.model}, {verdict.prompt_ref}) suggested {verdict.choice} "
                         f"({verdict.error_type.value}) but was not accepted: {verdict.reason}")
        rv = vote(similar) if similar else None
        if rv is not None and rv.confidence >= self.config.retrieval_accept_at and rv.confidence > original.root_cause.confidence:
            diag = self._apply_vote(result, rv, notes)
            return Refinement(diag, verdict, rv, similar, True)
        if original.root_cause.error_type is ErrorType.Unknown and self.examples is not None:
            try:
                ev = self.examples.vote(self._error_lines(result))
            except Exception as exc:  # noqa: BLE001 - an aid; never fail the diagnosis
                ev = None
                notes.append(f"example retrieval failed: {type(exc).__name__}: {exc}")
            if ev is not None:
                if not self.client.available:
                    # the no-model agent (build_fallback_agent): its caller makes the vote a note
                    return Refinement(self._apply_example_vote(result, ev, notes), verdict, None, similar, True)
                # a model was asked and gave no answer the agent accepts (or could not be reached):
                # the rules' Unknown stands and the nearest examples' type is a suggestion, as
                # without a model; as the answer it raised false alarms on a fresh sealed split
                # (negative controls 2 -> 5 of 32 with the endpoint down) and named a wrong type
                # more often than a right one on the labelled splits (bench/README.md)
                notes.append(f"suggestion, not applied (a resemblance is no evidence): "
                             f"{ev.error_type.value}? {_example_explanation(ev)}")
        return Refinement(replace(original, notes=[*original.notes, *notes]), verdict, rv, similar, True)

    def _maybe_propose_rule(self, result: Any, v: AgentVerdict, diag: Diagnosis) -> None:
        if self.rule_sink is None or v.error_type is ErrorType.Unknown:
            return
        chosen = next((c for c in self.candidates(result) if c.id == v.choice), None)
        if (chosen is not None and chosen.event is not None and chosen.error_type is not ErrorType.Unknown
                and chosen.error_type == v.error_type):
            return  # an existing specific rule already finds this
        texts = line_texts(result.compressed.text)
        evidence = [texts[ln] for ln in v.evidence_lines if ln in texts][:3]
        if not evidence:
            return
        try:
            if self.rule_writer is None:
                from app.llm.rulewriter import DiagnosisRuleWriter

                self.rule_writer = DiagnosisRuleWriter(client=self.client)
            proposal = self.rule_writer.propose(
                evidence=evidence, error_type=v.error_type, category=diag.root_cause.category,
                sink=self.rule_sink, corpus=list(texts.values()), hint=v.explanation[:300])
            if proposal.proposal_id is not None:
                diag.notes.append(f"proposed rule {proposal.rule.rule['id']} (proposal {proposal.proposal_id})")
        except Exception as exc:  # noqa: BLE001 - proposing a rule is a bonus, never a failure
            diag.notes.append(f"rule proposal failed: {type(exc).__name__}: {exc}")

    def _action(self, error_type: ErrorType, category: Category, confidence: float, event: Any,
                fallback: ActionKind | None, reason_prefix: str, *, proposed: ActionKind | None = None) -> Action:
        """The action for an answer the agent took. The policies see only its type and event here
        (not the log's context: whether the ranks ever connected, trained before it, a save
        running), so a JSON model's own action (`proposed`), decided from the whole compressed log
        and the rubric's conventions, is taken instead; but a model never drains a node the
        policies would not (a proposed isolate where they do not isolate keeps theirs)."""
        ctx = PolicyContext(error_type=error_type, category=category, confidence=confidence,
                            rule_action=getattr(event, "action", None) if event is not None else None,
                            event_ranks=frozenset(getattr(event, "ranks", ()) or ()),
                            hosts=tuple(sorted(getattr(event, "hosts", ()) or ())))
        d = decide(ctx, self.policies)
        kind, reason = d.kind, d.reason
        if proposed is not None and proposed is not kind and not (
                proposed is ActionKind.ISOLATE_AND_RESTART and kind is not ActionKind.ISOLATE_AND_RESTART):
            kind, reason = proposed, (f"{reason_prefix} proposed this action from the log (the policy for "
                                      f"{error_type.value} alone: {d.kind.value}).")
        elif d.policy_id == "fallback" and fallback is not None:
            kind, reason = fallback, f"{reason_prefix} proposed this action"
        hosts, ranks = [], []
        if kind is ActionKind.ISOLATE_AND_RESTART and event is not None:
            occ = getattr(event, "occurrences", None) or []
            hosts = sorted({o.host for o in occ if o.host}) or sorted(getattr(event, "hosts", ()) or ())
            ranks = sorted({o.rank for o in occ if o.rank is not None})
        return Action(kind=kind, suspect_hosts=hosts[:32], suspect_ranks=ranks[:64], reason=reason)

    def _apply_verdict(self, result: Any, v: AgentVerdict, notes: list[str]) -> Diagnosis:
        original: Diagnosis = result.diagnosis
        cands = {c.id: c for c in self.candidates(result)}
        chosen = cands.get(v.choice)
        event = chosen.event if chosen else None
        texts = line_texts(result.compressed.text)
        if event is not None:
            evidence = _event_evidence(event)
        else:
            evidence = [Evidence(line=ln, text=texts[ln][:2000]) for ln in v.evidence_lines if ln in texts][:5]
        category = v.category if v.mode == "json" else (chosen.category if chosen else default_category(v.error_type))
        same = v.error_type == original.root_cause.error_type and (
            event is None or event.first_line == (original.root_cause.evidence[0].line if original.root_cause.evidence else None))
        rc = RootCause(error_type=v.error_type, category=category, confidence=min(0.95, v.confidence),
                       evidence=evidence, explanation=v.explanation,
                       rule_id=getattr(event, "rule_id", None),
                       gpu=next(iter(sorted(getattr(event, "gpus", ()) or ())), None) if event is not None else None,
                       xid=next(iter(sorted(getattr(event, "xids", ()) or ())), None) if event is not None else None)
        co = _co_occurring_after_switch(original, event, result)
        action = _named(self._action(v.error_type, category, rc.confidence, event, v.action, "the LLM",
                                     proposed=v.action if v.mode == "json" else None), result,
                        event.first_line if event is not None else None)
        notes.append(f"llm ({v.model}, {v.prompt_ref}, {v.mode}) chose {v.choice} -> {v.error_type.value} "
                     f"with confidence {v.confidence:.2f}; "
                     + ("agrees with the rules" if same else
                        f"rules had {original.root_cause.error_type.value} ({original.root_cause.confidence:.2f})"))
        return replace(
            original, root_cause=rc, co_occurring=co if not same else original.co_occurring, action=action,
            decided_by=DecidedBy.LLM, notes=[*original.notes, *notes],
            versions=replace(original.versions, prompt=v.prompt_ref, model=v.model))

    def _apply_example_vote(self, result: Any, ev: Any, notes: list[str]) -> Diagnosis:
        original: Diagnosis = result.diagnosis
        rules = ", ".join(dict.fromkeys(m.example.rule_id for m in ev.support))
        confidence = min(0.6, ev.confidence)  # a nearest-example guess, never a confident rule
        rc = RootCause(error_type=ev.error_type, category=ev.category, confidence=confidence,
                       evidence=[Evidence(line=ev.line, text=ev.text[:2000])], explanation=_example_explanation(ev))
        action = self._action(ev.error_type, ev.category, confidence, None, None, "example retrieval")
        if action.kind is ActionKind.ISOLATE_AND_RESTART:
            # a line that merely resembles a hardware rule's example does not drain a node: the
            # engineer (or the node probe) decides
            action = Action(kind=ActionKind.INVESTIGATE, reason=(
                f"No rule matched; the nearest rule examples are {ev.error_type.value} faults, which would isolate "
                "the node. A resemblance does not drain a node: check the line, and probe the job's nodes "
                "(two-round allgather) before draining any."))
        action = _named(action, result, ev.line)
        notes.append(f"example retrieval: {ev.error_type.value} (confidence {ev.confidence:.2f}) from line "
                     f"{ev.line}, nearest rules {rules}")
        return replace(original, root_cause=rc, action=action, decided_by=DecidedBy.RETRIEVAL,
                       notes=[*original.notes, *notes])

    def _apply_vote(self, result: Any, rv: RetrievalVote, notes: list[str]) -> Diagnosis:
        original: Diagnosis = result.diagnosis
        event = next((e for e in sorted(getattr(result, "events", []) or [], key=lambda e: e.first_line)
                      if _val(e.error_type) == rv.error_type.value), None)
        evidence = _event_evidence(event) if event is not None else list(original.root_cause.evidence)
        ids = ", ".join(f"{s.case.case_id} ({s.similarity:.2f})" for s in rv.support[:5])
        rc = RootCause(error_type=rv.error_type, category=rv.category, confidence=min(0.9, rv.confidence),
                       evidence=evidence, rule_id=getattr(event, "rule_id", None),
                       explanation=f"Similar labelled failures agree on {rv.error_type.value}: {ids}.")
        co = _co_occurring_after_switch(original, event, result) if event is not None else original.co_occurring
        action = _named(self._action(rv.error_type, rv.category, rc.confidence, event, rv.action,
                                     "similar past cases"), result,
                        event.first_line if event is not None else None)
        notes.append(f"retrieval vote: {rv.error_type.value} (confidence {rv.confidence:.2f}) from {ids}; "
                     f"rules had {original.root_cause.error_type.value} ({original.root_cause.confidence:.2f})")
        return replace(original, root_cause=rc, co_occurring=co, action=action, decided_by=DecidedBy.RETRIEVAL,
                       notes=[*original.notes, *notes])


def _example_explanation(ev: Any) -> str:
    """What an example vote rests on: the line, the type and rules of the nearest examples."""
    rules = ", ".join(dict.fromkeys(m.example.rule_id for m in ev.support))
    return (f"No rule matched. Line {ev.line} is closest to the rule library's examples of {ev.error_type.value} "
            f"(rules {rules}; similarity {max(m.similarity for m in ev.support):.2f}).")


def _named(action: Action, result: Any, line: int | None = None) -> Action:
    """The hosts of an isolate action, as the pipeline names them (or a reason saying the node
    probe must find them): from the ranks it suspects, the registered job, or the shell session
    the failing `line` was printed in."""
    from app.core.placement import name_hosts, session_host

    compressed = getattr(result, "compressed", None)
    session = None
    if line is not None and compressed is not None:
        session = session_host(getattr(compressed, "templates", []) or [], line)
    return name_hosts(action, rank_hosts=getattr(compressed, "rank_hosts", {}) or {},
                      job=getattr(result, "job", None), session=session)


def _cited_in(text: str) -> list[str]:
    import regex

    return regex.findall(r"\b(?:line|L)\s?(\d{1,9})\b", text, flags=regex.IGNORECASE)


def _event_evidence(event: Any) -> list[Evidence]:
    out, seen = [], set()
    for occ in getattr(event, "occurrences", None) or []:
        if occ.text in seen:
            continue
        seen.add(occ.text)
        out.append(Evidence(line=occ.line, text=occ.text[:2000], rank=occ.rank, host=occ.host))
        if len(out) >= 5:
            break
    return out or [Evidence(line=event.first_line, text=event.text[:2000], rank=getattr(event, "first_rank", None),
                            host=getattr(event, "first_host", None))]


def _co_occurring_after_switch(original: Diagnosis, chosen: Any, result: Any) -> list[CoOccurring]:
    """Drop the newly chosen event from co_occurring and list the old root cause there instead."""
    co = [c for c in original.co_occurring
          if chosen is None or not (c.rule_id == chosen.rule_id and c.first_line == chosen.first_line)]
    old = original.root_cause
    old_line = old.evidence[0].line if old.evidence else None
    if chosen is not None and old_line is not None and old_line != chosen.first_line and old.rule_id:
        old_ev = next((e for e in getattr(result, "events", []) or []
                       if e.rule_id == old.rule_id and e.first_line == old_line), None)
        co.insert(0, CoOccurring(
            error_type=old.error_type, role="symptom" if old_line > chosen.first_line else "independent",
            count=getattr(old_ev, "count", 1), first_line=old_line, rule_id=old.rule_id,
            ranks=sorted(getattr(old_ev, "ranks", ()) or ())[:64], hosts=sorted(getattr(old_ev, "hosts", ()) or ())[:64]))
    return co


def _job_context(result: Any) -> str:
    d: Diagnosis = result.diagnosis
    c = d.compression
    parts = [f"log: {c.lines_in} lines, {c.lines_kept} kept after compression"]
    if d.last_progress is not None:
        parts.append(f"last training progress at line {d.last_progress.line}"
                     + (f" (step {d.last_progress.step})" if d.last_progress.step is not None else ""))
    ranks = getattr(result.compressed, "known_ranks", None)
    if ranks:
        parts.append(f"{len(ranks)} rank(s) seen")
    parts.append(f"rules' ranking: {d.root_cause.error_type.value} with confidence {d.root_cause.confidence:.2f}")
    return "; ".join(parts)

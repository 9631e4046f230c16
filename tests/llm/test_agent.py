from app.core.types import ActionKind, DecidedBy, ErrorType
from app.llm.agent import AgentConfig, FailureAgent
from app.llm.backends.fake import FakeBackend
from app.llm.budget import fit_log, line_texts
from app.llm.client import LLMClient
from app.llm.ports import InMemoryCaseStore, LabelledCase, SimilarCase
from app.core.types import Category

import numpy as np

from tests.llm.conftest import OOM_LOG, make_result


def json_agent(answer, **cfg):
    return FailureAgent(LLMClient(FakeBackend(json_answer=answer)), config=AgentConfig(**cfg))


GOOD = {"choice": "e1", "error_type": "OutOfMemoryError", "category": "framework", "action": "no_retry",
        "confidence": 0.9, "explanation": "Rank 1 ran out of memory at line 95; the timeouts at L110 follow.",
        "evidence_lines": [95]}


def test_an_answer_of_no_failure_needs_less_confidence_than_a_fault():
    """`Unknown` (the log shows no failure) leads to investigate, which acts on nothing: the agent
    takes it at `accept_unknown_at` (0.4); a fault the controller would act on needs `accept_at`."""
    result = make_result()  # the rules are unsure (NCCL timeouts, confidence under the trigger)
    none = {"choice": "other", "error_type": "Unknown", "category": "unknown", "action": "investigate",
            "confidence": 0.5, "explanation": "Training went on after line 95; nothing failed.", "evidence_lines": [95]}
    d = json_agent(none).refine(result)
    assert d.decided_by is DecidedBy.LLM and d.root_cause.error_type is ErrorType.Unknown
    assert d.action.kind is ActionKind.INVESTIGATE
    fault = {**GOOD, "confidence": 0.5}
    d = json_agent(fault).refine(result)
    assert d.decided_by is not DecidedBy.LLM and d.root_cause.error_type is result.diagnosis.root_cause.error_type
    assert any("not accepted: confidence 0.50 < 0.60" in n for n in d.notes)
    d = json_agent({**none, "confidence": 0.3}).refine(result)
    assert d.decided_by is not DecidedBy.LLM
    # a fault from 0.6 (`accept_at`)
    d = json_agent({**GOOD, "confidence": 0.65}).refine(result)
    assert d.decided_by is DecidedBy.LLM and d.root_cause.error_type is ErrorType.OutOfMemoryError


def test_confident_ranking_skips_the_llm():
    backend = FakeBackend(json_answer=GOOD)
    result = make_result(root="oom", confidence=0.95)
    assert FailureAgent(LLMClient(backend)).refine(result) is result.diagnosis
    assert backend.prompts == []


def test_llm_switches_root_cause_and_records_what_it_said():
    result = make_result()
    ref = json_agent(GOOD).review(result)
    d = ref.diagnosis
    assert d.decided_by is DecidedBy.LLM
    assert d.root_cause.error_type is ErrorType.OutOfMemoryError and d.root_cause.evidence[0].line == 95
    assert d.root_cause.rule_id == "torch-cuda-oom"
    assert d.versions.prompt.startswith("root_cause/v3#") and d.versions.model == "fake:fake-1"
    assert any("chose e1" in n and "rules had NCCLTimeoutError" in n for n in d.notes)
    assert d.co_occurring[0].error_type is ErrorType.NCCLTimeoutError and d.co_occurring[0].role == "symptom"
    assert d.action.kind is ActionKind.NO_RETRY  # no policy given: the LLM's action
    assert ref.verdict.to_json_dict()["raw"]["choice"] == "e1"


def test_invalid_answers_are_rejected_with_a_note():
    bad = [
        {**GOOD, "choice": "e9"},  # not a candidate
        {**GOOD, "confidence": 0.3},  # not confident
        {**GOOD, "choice": "other", "evidence_lines": [4242], "explanation": "no lines"},  # cites nothing real
        {**GOOD, "error_type": "MadeUpError"},  # not canonical
        {**GOOD, "error_type": "ChildFailedError"},  # a symptom
    ]
    for answer in bad:
        result = make_result()
        d = json_agent(answer).refine(result)
        assert d.decided_by is DecidedBy.RULES, answer
        assert d.root_cause == result.diagnosis.root_cause
        assert any("llm" in n for n in d.notes), (answer, d.notes)


def test_other_with_cited_lines_builds_evidence_from_the_log():
    answer = {**GOOD, "choice": "other", "error_type": "HostOOMKilled", "evidence_lines": [96]}
    d = json_agent(answer).refine(make_result())
    assert d.root_cause.error_type is ErrorType.HostOOMKilled
    assert d.root_cause.evidence[0].line == 96 and "train.py" in d.root_cause.evidence[0].text


def test_choice_mode_calibrates_against_letter_bias():
    # a model that always prefers "A" regardless of content, plus a real preference for the OOM text
    def scores(prompt, choices):
        base = [3.0 if c == "A" else 0.0 for c in choices]
        if "N/A" in prompt:
            return base
        listing = prompt.split("Candidate root causes:")[1]
        order = [ln for ln in listing.splitlines() if ln[:2] in {f"{c})" for c in choices}]
        return [b + (2.5 if "OutOfMemoryError" in ln else 0.0) for b, ln in zip(base, order)]

    agent = FailureAgent(LLMClient(FakeBackend(choice_scores=scores, supports_json=False)),
                         config=AgentConfig(accept_at_scoring=0.7))
    ref = agent.review(make_result())
    assert ref.verdict.mode == "choice" and ref.verdict.choice == "e1"
    assert ref.verdict.confidence > 0.8
    assert ref.diagnosis.decided_by is DecidedBy.LLM
    assert ref.diagnosis.root_cause.error_type is ErrorType.OutOfMemoryError


def test_choice_mode_position_bias_alone_is_not_accepted():
    agent = FailureAgent(LLMClient(FakeBackend(choice_scores=lambda p, c: [3.0 if x == "A" else 0 for x in c],
                                               supports_json=False)))
    ref = agent.review(make_result())
    assert ref.verdict is not None and not ref.verdict.accepted
    assert ref.diagnosis.decided_by is DecidedBy.RULES


def test_retrieval_vote_is_the_fallback_when_the_llm_is_absent():
    store = InMemoryCaseStore()

    class OneHotEmbedder:
        name = "onehot"

        def embed(self, texts):
            return np.array([[1.0, 0.0]] * len(texts), dtype=np.float32)

    from app.llm.retrieval import Retriever

    retr = Retriever(OneHotEmbedder(), store)
    for i in range(3):
        store.add(LabelledCase(f"c{i}", "sig", np.array([1.0, 0.0], np.float32), ErrorType.OutOfMemoryError,
                               Category.FRAMEWORK, ActionKind.NO_RETRY, human_confirmed=True, embedder="onehot"))
    from app.llm.backends.none import NoneBackend

    agent = FailureAgent(LLMClient(NoneBackend()), retriever=retr)
    d = agent.refine(make_result())
    assert d.decided_by is DecidedBy.RETRIEVAL
    assert d.root_cause.error_type is ErrorType.OutOfMemoryError and d.root_cause.evidence[0].line == 95
    assert any("retrieval vote" in n for n in d.notes)


def test_similar_cases_are_in_the_prompt_human_confirmed_first():
    backend = FakeBackend(json_answer=GOOD)
    agent = FailureAgent(LLMClient(backend))
    case = lambda cid, conf: LabelledCase(cid, "s", np.zeros(2, np.float32), ErrorType.OutOfMemoryError,
                                          Category.FRAMEWORK, ActionKind.NO_RETRY, conf, evidence=f"ev-{cid}")
    agent.decide(make_result(), similar_cases=[SimilarCase(case("a", True), 0.7), SimilarCase(case("b", False), 0.9)])
    prompt = backend.prompts[0]
    assert prompt.index("ev-a") < prompt.index("ev-b") and "(human-confirmed)" in prompt


def test_fit_log_keeps_evidence_and_marks_gaps():
    big = OOM_LOG + "".join(f" L{200 + i}: filler line number {i} with some words\n" for i in range(400))
    text, used = fit_log(big, 120, lambda s: max(1, len(s) // 4), evidence_lines=[95, 110])
    assert used <= 120
    assert "OutOfMemoryError" in text and "Watchdog" in text and "line(s) omitted" in text
    assert 95 in line_texts(text)


def test_confident_other_answer_proposes_a_validated_rule():
    from app.llm.ports import InMemoryProposedRuleSink

    sink = InMemoryProposedRuleSink()
    answer = {**GOOD, "choice": "other", "error_type": "HostOOMKilled", "evidence_lines": [95],
              "explanation": "The kernel OOM killer ended rank 1 (line 95)."}
    agent = FailureAgent(LLMClient(FakeBackend(json_answer=answer)), rule_sink=sink)
    d = agent.refine(make_result())
    assert d.root_cause.error_type is ErrorType.HostOOMKilled
    assert len(sink.proposals) == 1, d.notes
    rule = next(iter(sink.proposals.values())).rule
    assert rule["error_type"] == "HostOOMKilled" and rule["examples"]["match"]
    assert any("proposed rule" in n for n in d.notes)


def test_a_json_models_action_is_taken_but_never_drains_a_node_the_policies_would_not():
    """The agent's policy context has only the answer's type and event, not the log's (whether
    the ranks ever connected, trained before it): a JSON model's own action, decided from the
    log, is taken; a proposed isolate where the type's policy does not isolate is not."""
    from app.core.rules import load_rules

    policies = load_rules().policies
    timeout = {**GOOD, "choice": "e2", "error_type": "NCCLTimeoutError", "category": "infrastructure",
               "action": "no_retry", "explanation": "The all-reduce at L110 waited on the job's own slow step.",
               "evidence_lines": [110]}

    def agent(answer):
        return FailureAgent(LLMClient(FakeBackend(json_answer=answer)), policies=policies)

    d = agent(timeout).refine(make_result())
    assert d.decided_by is DecidedBy.LLM and d.root_cause.error_type is ErrorType.NCCLTimeoutError
    assert d.action.kind is ActionKind.NO_RETRY and "proposed this action from the log" in d.action.reason
    assert "investigate" in d.action.reason  # the policy's own choice (a silent rank), said beside it
    d = agent({**timeout, "action": "isolate_and_restart"}).refine(make_result())
    assert d.action.kind is ActionKind.INVESTIGATE and d.action.suspect_hosts == []

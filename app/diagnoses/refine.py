"""The LLM step of a service diagnosis: after the rules, when ranking is unsure (confidence under
`LOGDX_LLM_TRIGGER_BELOW`) or nothing matched, the failure agent reviews the result.

One `LLMRefiner` per diagnosis worker process (thread mode: per executor); its backend and agent
are built on first need, so a confident diagnosis never loads a model. With the `none` backend
there is no refiner at all. The LLM failing in any way (dead endpoint, bad answer, a bug) never
fails a diagnosis: the rules' result is kept with a note.
"""

from __future__ import annotations

import dataclasses
import logging
import threading
import time
from typing import TYPE_CHECKING, Any

from app.core.pipeline import DiagnosisResult, Pipeline
from app.core.types import Diagnosis, ErrorType
from app.db.engine import Database
from app.llm.ports import ProposedRule, ProposedRuleSink
from app.llm.retrieval import Embedder
from app.settings import LLMBackendName, Settings

if TYPE_CHECKING:  # the agent and its backends load only when a backend is configured
    from app.llm.agent import FailureAgent

log = logging.getLogger("logdx.llm")
BUILD_RETRY_S = 60.0  # after a failed backend build, diagnoses skip the LLM this long


class _SourcedSink:
    """Stamps proposals with the diagnosis they came from."""

    def __init__(self, sink: ProposedRuleSink, diagnosis_id: int) -> None:
        self.sink, self.diagnosis_id = sink, diagnosis_id

    def propose(self, rule: ProposedRule) -> str:
        if rule.source_diagnosis_id is None:
            rule = dataclasses.replace(rule, source_diagnosis_id=str(self.diagnosis_id))
        return self.sink.propose(rule)


class LLMRefiner:
    def __init__(self, settings: Settings, *, db: Database | None = None, embedder: Embedder | None = None,
                 agent: FailureAgent | None = None) -> None:
        self.settings = settings
        self._db = db
        self._embedder = embedder
        self._agent = agent
        self._sink: ProposedRuleSink | None = None
        self._failed: tuple[float, str] | None = None
        self._lock = threading.Lock()

    @classmethod
    def for_settings(cls, settings: Settings, **kwargs: Any) -> LLMRefiner | None:
        """None for the `none` backend: no agent, no cost."""
        return None if settings.llm_backend == LLMBackendName.NONE else cls(settings, **kwargs)

    def should_consult(self, result: DiagnosisResult) -> bool:
        rc = result.diagnosis.root_cause
        return rc.confidence < self.settings.llm_trigger_below or rc.error_type is ErrorType.Unknown

    def _get_agent(self, pipeline: Pipeline) -> FailureAgent:
        with self._lock:
            if self._agent is not None:
                return self._agent
            if self._failed is not None and time.monotonic() - self._failed[0] < BUILD_RETRY_S:
                raise RuntimeError(self._failed[1])
            try:
                from app.labels.case_store import DbCaseStore
                from app.llm.factory import build_agent
                from app.rules_review.sink import DbProposedRuleSink

                if self._db is None:  # a spawned worker process opens its own pool
                    self._db = Database(self.settings.effective_database_url)
                self._sink = DbProposedRuleSink(self._db)
                self._agent = build_agent(self.settings, case_store=DbCaseStore(self._db), rule_sink=self._sink,
                                          policies=pipeline.ruleset.policies, embedder=self._embedder,
                                          ruleset=pipeline.ruleset)
            except Exception as exc:
                self._failed = (time.monotonic(), f"LLM backend unavailable: {type(exc).__name__}: {exc}")
                log.warning("cannot build the LLM agent: %r", exc)
                raise RuntimeError(self._failed[1]) from exc
            assert self._agent is not None
            return self._agent

    def review(self, result: DiagnosisResult, *, pipeline: Pipeline, diagnosis_id: int | None = None,
               propose_rules: bool = True) -> tuple[Diagnosis, dict[str, Any] | None]:
        """(diagnosis to store, LLM accounting or None when the agent was not consulted)."""
        if not self.should_consult(result):
            return result.diagnosis, None
        original = result.diagnosis
        try:
            agent = self._get_agent(pipeline)
            sink = (_SourcedSink(self._sink, diagnosis_id) if self._sink is not None and diagnosis_id is not None
                    else self._sink) if propose_rules else None
            from app.llm.factory import scoped_agent

            scoped, calls = scoped_agent(agent, policies=pipeline.ruleset.policies, rule_sink=sink)
            refinement = scoped.review(result)
        except Exception as exc:  # noqa: BLE001 - the LLM never fails a diagnosis
            log.warning("LLM review failed, keeping the rules' result: %r", exc)
            note = f"llm review failed ({type(exc).__name__}: {exc}); kept the rules result"
            return (dataclasses.replace(original, notes=[*original.notes, note[:500]]),
                    {"consulted": True, "verdict": None, "error": note[:500],
                     "calls": 0, "tokens_in": 0, "tokens_out": 0, "latency_s": 0.0})
        totals = calls.totals()
        verdict = refinement.verdict.to_json_dict() if refinement.verdict is not None else None
        errors = [r.error for r in calls.records if r.error]
        return refinement.diagnosis, {
            "consulted": refinement.consulted, "verdict": verdict,
            "accepted": bool(refinement.verdict and refinement.verdict.accepted),
            "error": errors[-1] if errors and verdict is None else None,
            "calls": int(totals["calls"]), "tokens_in": int(totals["tokens_in"]),
            "tokens_out": int(totals["tokens_out"]), "latency_s": float(totals["latency_s"]),
            "model": f"{agent.client.backend.name}:{agent.client.backend.model}"}

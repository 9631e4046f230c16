"""`LLMClient`: the only way the rest of logdx calls a backend. Around every call it masks the
input (hosted backends), checks the circuit breaker, serves/fills the cache (coalescing identical
in-flight requests), restores masked values in the answer and records tokens and latency."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from app.llm.backends.base import ChoiceScores, JSONAnswer, LLMBackend
from app.llm.breaker import CircuitBreaker
from app.llm.cache import ResponseCache, cache_key
from app.llm.errors import BackendUnavailable, CircuitOpenError, LLMError, UnsupportedOperation
from app.llm.masking import Masker


@dataclass
class CallRecord:
    backend: str
    model: str
    prompt_version: str
    kind: str  # "json" | "choices"
    tokens_in: int
    tokens_out: int
    latency_s: float
    cached: bool
    ok: bool
    error: str | None = None


@dataclass
class CallLog:
    """Per-call accounting; the service exports it as metrics, the bench sums it."""

    records: list[CallRecord] = field(default_factory=list)
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def add(self, rec: CallRecord) -> None:
        with self._lock:
            self.records.append(rec)

    def totals(self) -> dict[str, float]:
        live = [r for r in self.records if not r.cached]
        return {"calls": len(live), "cached": len(self.records) - len(live),
                "tokens_in": sum(r.tokens_in for r in live), "tokens_out": sum(r.tokens_out for r in live),
                "latency_s": round(sum(r.latency_s for r in live), 3),
                "errors": sum(1 for r in self.records if not r.ok)}


class LLMClient:
    def __init__(self, backend: LLMBackend, *, mask: bool | None = None, masker: Masker | None = None,
                 cache: ResponseCache | None = None, breaker: CircuitBreaker | None = None,
                 call_log: CallLog | None = None) -> None:
        self.backend = backend
        # masking is on by default exactly when the prompt leaves the machine
        self.mask = backend.hosted if mask is None else mask
        self.masker = masker or Masker()
        self.cache = cache if cache is not None else ResponseCache()
        self.breaker = breaker or CircuitBreaker()
        self.calls = call_log or CallLog()

    @property
    def available(self) -> bool:
        return self.backend.name != "none"

    def count_tokens(self, text: str) -> int:
        return self.backend.count_tokens(text)

    def complete_json(self, prompt: str, schema: dict[str, Any], *, prompt_version: str,
                      system: str | None = None, known_hosts: Iterable[str] = ()) -> JSONAnswer:
        masked, masking = self._mask(prompt, known_hosts)
        masked_system = self._mask(system, known_hosts, masking)[0] if system else None
        key = cache_key(backend=self.backend.name, model=self.backend.model, prompt_version=prompt_version,
                        masked_input=(masked_system or "") + "\0" + masked, extra=["json", schema])
        answer: JSONAnswer = self._run("json", prompt_version, key,
                                       lambda: self.backend.complete_json(masked, schema, system=masked_system))
        return JSONAnswer(masking.restore_obj(answer.data), answer.usage, answer.repaired)

    def score_choices(self, prompt: str, choices: list[str], *, prompt_version: str,
                      system: str | None = None, known_hosts: Iterable[str] = ()) -> ChoiceScores:
        masked, masking = self._mask(prompt, known_hosts)
        masked_system = self._mask(system, known_hosts, masking)[0] if system else None
        key = cache_key(backend=self.backend.name, model=self.backend.model, prompt_version=prompt_version,
                        masked_input=(masked_system or "") + "\0" + masked, extra=["choices", choices])
        return self._run("choices", prompt_version, key,
                         lambda: self.backend.score_choices(masked, choices, system=masked_system))

    def _mask(self, text: str | None, hosts: Iterable[str], masking=None):
        if text is None or not self.mask:
            from app.llm.masking import Masking

            return text, masking or Masking()
        return self.masker.mask(text, known_hosts=hosts, masking=masking)

    def _run(self, kind: str, prompt_version: str, key: str, call):
        if not self.available:
            raise BackendUnavailable("LLM backend is 'none' (rules only)")
        if not self.breaker.allow():
            self._record(kind, prompt_version, 0, 0, 0.0, False, False, "circuit open")
            raise CircuitOpenError("LLM circuit breaker is open after repeated failures")
        started = time.perf_counter()
        try:
            value, cached = self.cache.get_or_compute(key, call)
        except UnsupportedOperation:
            raise
        except LLMError as exc:
            self.breaker.record_failure()
            self._record(kind, prompt_version, 0, 0, time.perf_counter() - started, False, False,
                         f"{type(exc).__name__}: {exc}")
            raise
        except Exception as exc:  # a backend bug must not fail a diagnosis either
            self.breaker.record_failure()
            self._record(kind, prompt_version, 0, 0, time.perf_counter() - started, False, False,
                         f"{type(exc).__name__}: {exc}")
            raise LLMError(f"backend failed: {type(exc).__name__}: {exc}") from exc
        self.breaker.record_success()
        usage = value.usage
        self._record(kind, prompt_version, 0 if cached else usage.tokens_in, 0 if cached else usage.tokens_out,
                     time.perf_counter() - started, cached, True, None)
        return value

    def _record(self, kind, version, tin, tout, latency, cached, ok, error) -> None:
        self.calls.add(CallRecord(self.backend.name, self.backend.model, version, kind, tin, tout,
                                  round(latency, 4), cached, ok, error))

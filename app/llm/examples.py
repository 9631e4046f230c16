"""Help on logs no rule explains: the rule library's own `match` examples as a retrieval corpus.

Every diagnosis rule carries example lines, each labelled by the rule's type: hundreds of real
error wordings, one canonical type each, with no database. When ranking finds no event but the
log has error-looking lines that no rule matched, the most error-looking ones are embedded
(MiniLM) and compared with the examples:
- the nearest types become candidates for the failure agent (so a local scoring model always has
  something to choose among, and a JSON model sees plausible types next to the line);
- without an LLM, or when its answer is not accepted, a similarity-weighted vote over the
  nearest examples is the fallback (`decided_by: retrieval`), with the line as evidence.
"""

from __future__ import annotations

import hashlib
import os
import threading
from collections.abc import Sequence
from pathlib import Path
from dataclasses import dataclass
from typing import Any

import numpy as np
import regex

from app.core.types import Category, ErrorType, default_category
from app.llm.retrieval import Embedder, normalise

# how error-looking a line is: an exception line ("...Error: msg") beats a log level or a verb
_SCORES: list[tuple[regex.Pattern, float]] = [
    (regex.compile(r"^\s*(?:\[[^\]]*\]:?\s*)*(?:[\w.]+\.)?(?:[A-Z]\w*)?(?:Error|Exception|Exit|Interrupt)\b:?"), 5.0),
    (regex.compile(r"(?:\b[A-Z]\w*)?(?:Error|Exception)\b:"), 4.0),
    (regex.compile(r":\s(?:error|fatal error|FATAL):\s", regex.IGNORECASE), 4.0),
    (regex.compile(r"\b(?:FATAL|fatal|panic|Segmentation fault|core dumped|Aborted)\b"), 3.0),
    (regex.compile(r"\b(?:ERROR|error|failed|FAILED|Killed|killed)\b"), 2.0),
    (regex.compile(r"\b(?:timed out|[Tt]imeout|Errno)\b"), 1.5),
    (regex.compile(r"\b(?:WARN|WARNING|warning)\b"), -1.5),
    # a line its emitter logged at INFO or DEBUG is not its error ("INFO:...: Setting worker0
    # reply file to: .../error.json")
    (regex.compile(r"(?:^|[\s\[|(])(?:INFO|DEBUG)\b"), -3.0),
    (regex.compile(r"Traceback \(most recent call last\)|^\s*File \"|^\s*\^+\s*$"), -4.0),
]


def error_score(text: str) -> float:
    return sum(w for rx, w in _SCORES if rx.search(text))


def error_looking_lines(flagged: Sequence[tuple[int, str]], limit: int = 3) -> list[tuple[int, str]]:
    """The `limit` most error-looking of the lines no rule explained (earlier first on ties),
    one per distinct normalised text."""
    seen: set[str] = set()
    scored = []
    for line, text in flagged:
        key = normalise(text)[:200]
        if key in seen or error_score(text) <= 0:
            continue
        seen.add(key)
        scored.append((-error_score(text), line, text))
    return [(line, text) for _, line, text in sorted(scored)[:limit]]


def default_cache_dir() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "logdx" / "embeddings"


@dataclass(frozen=True)
class RuleExample:
    text: str
    error_type: ErrorType
    category: Category
    rule_id: str


def rule_examples(rules: Sequence[Any]) -> list[RuleExample]:
    """Every `match` example of the diagnosis rules, typed as the rule would type it."""
    out = []
    for rule in rules:
        spec = rule.spec
        for text in spec.examples.match:
            etype = spec.error_type
            if spec.type_from_group:
                m = rule.regex.search(text)
                name = (m.group(spec.type_from_group) if m else None) or ""
                try:
                    etype = ErrorType(name.rsplit(".", 1)[-1])
                except ValueError:
                    pass
            if etype in (ErrorType.ChildFailedError, ErrorType.Unknown):
                continue
            category = spec.category if (spec.category and etype == spec.error_type) else default_category(etype)
            out.append(RuleExample(text, etype, category, rule.id))
    return out


@dataclass(frozen=True)
class ExampleMatch:
    example: RuleExample
    similarity: float


@dataclass(frozen=True)
class ExampleVote:
    error_type: ErrorType
    category: Category
    line: int
    text: str
    confidence: float  # winner's weighted share x its best similarity
    support: list[ExampleMatch]


class ExampleIndex:
    """The examples embedded once (lazily, on first use), then a matrix product per query."""

    def __init__(self, embedder: Embedder, examples: Sequence[RuleExample], *,
                 cache_dir: Path | str | None = None) -> None:
        self.embedder = embedder
        self.examples = list(examples)
        self.cache_dir = Path(cache_dir) if cache_dir else default_cache_dir()
        self._matrix: np.ndarray | None = None
        self._lock = threading.Lock()

    def _vectors(self) -> np.ndarray:
        """Embedding the examples takes seconds on a CPU: the matrix is kept on disk, keyed by
        the embedder and the example texts (a rule change gives a new file)."""
        with self._lock:
            if self._matrix is not None:
                return self._matrix
            texts = [normalise(e.text) for e in self.examples]
            key = hashlib.sha256("\n".join([self.embedder.name, *texts]).encode()).hexdigest()[:20]
            path = self.cache_dir / f"rule-examples-{key}.npy"
            try:
                matrix = np.load(path)
                if matrix.shape[0] != len(texts):
                    raise ValueError("stale cache")
            except (OSError, ValueError):
                matrix = self.embedder.embed(texts)
                try:
                    self.cache_dir.mkdir(parents=True, exist_ok=True)
                    tmp = path.with_suffix(f".{os.getpid()}.tmp.npy")
                    np.save(tmp, matrix)
                    os.replace(tmp, path)
                except OSError:
                    pass  # a read-only cache only costs time
            self._matrix = matrix
            return matrix

    def without_rule(self, rule_id: str) -> ExampleIndex:
        """The same index minus one rule's examples (sharing the embedded matrix): what the
        library would know if that rule had never been written (the ablation in bench/eval_llm.py)."""
        keep = [i for i, e in enumerate(self.examples) if e.rule_id != rule_id]
        view = ExampleIndex(self.embedder, [self.examples[i] for i in keep], cache_dir=self.cache_dir)
        view._matrix = self._vectors()[keep]
        return view

    def nearest(self, text: str, k: int = 8) -> list[ExampleMatch]:
        if not self.examples:
            return []
        matrix = self._vectors()
        query = self.embedder.embed([normalise(text)])[0]
        sims = matrix @ query
        top = np.argsort(-sims)[:k]
        return [ExampleMatch(self.examples[i], float(sims[i])) for i in top]

    def candidate_types(self, text: str, *, k: int = 8, max_types: int = 4) -> list[ExampleMatch]:
        """The nearest examples of distinct types (best first)."""
        out, seen = [], set()
        for m in self.nearest(text, k):
            if m.example.error_type not in seen:
                seen.add(m.example.error_type)
                out.append(m)
            if len(out) >= max_types:
                break
        return out

    def vote(self, lines: Sequence[tuple[int, str]], *, k: int = 12, temperature: float = 0.05,
             min_share: float = 0.6, min_top: float = 0.6) -> ExampleVote | None:
        """For the most error-looking line that gets a clear winner: a softmax over each type's
        best similarity (a near tie between two types is no winner); None when the examples
        disagree or are far."""
        for line, text in lines:
            matches = self.nearest(text, k)
            best: dict[ErrorType, ExampleMatch] = {}
            for m in matches:
                if m.example.error_type not in best:
                    best[m.example.error_type] = m
            if not best:
                continue
            top = max(m.similarity for m in best.values())
            weights = {t: float(np.exp((m.similarity - top) / temperature)) for t, m in best.items()}
            winner = max(weights, key=lambda t: weights[t])
            share = weights[winner] / sum(weights.values())
            if share >= min_share and top >= min_top:
                support = [m for m in matches if m.example.error_type == winner]
                return ExampleVote(winner, best[winner].example.category, line, text,
                                   round(share * top, 3), support)
        return None

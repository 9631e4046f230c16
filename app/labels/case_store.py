"""The database-backed `CaseStore` (app.llm.ports): labelled failures embedded for retrieval.

`nearest` is a brute-force cosine over the vectors of one embedder, cached as a float32 matrix in
memory. The cache is checked against a cheap fingerprint of the table (count, newest id, newest
time) on every call, so a case added by another process (labels are posted to the API process,
retrieval runs in the diagnosis workers) is seen at the next diagnosis. Fine to ~100k cases.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
from sqlalchemy import func, select
from sqlalchemy.orm import Session

from app.core.types import ActionKind, Category, ErrorType
from app.db.base import utcnow
from app.db.engine import Database
from app.labels.models import LabelledCaseRow
from app.llm.ports import LabelledCase, SimilarCase

log = logging.getLogger("logdx.labels")


@dataclass
class _Matrix:
    fingerprint: tuple
    case_ids: list[str]
    matrix: np.ndarray  # (n, dim) float32


def _to_case(row: LabelledCaseRow) -> LabelledCase:
    return LabelledCase(case_id=row.case_id, signature=row.signature,
                        vector=np.frombuffer(row.vector, dtype=np.float32),
                        error_type=ErrorType(row.error_type), category=Category(row.category),
                        action=ActionKind(row.action), human_confirmed=row.human_confirmed,
                        evidence=row.evidence, embedder=row.embedder)


def upsert_case(*, session: Session, case: LabelledCase, label_id: int | None = None,
                diagnosis_id: int | None = None) -> LabelledCaseRow:
    """Insert or replace the case with this case_id (caller owns the transaction)."""
    vector = np.asarray(case.vector, dtype=np.float32).reshape(-1)
    row = session.scalar(select(LabelledCaseRow).where(LabelledCaseRow.case_id == case.case_id)
                         .with_for_update())
    if row is None:
        row = LabelledCaseRow(case_id=case.case_id)
        session.add(row)
    row.embedder = case.embedder
    row.dim = int(vector.shape[0])
    row.vector = vector.tobytes()
    row.signature = case.signature
    row.error_type = ErrorType(case.error_type).value
    row.category = Category(case.category).value
    row.action = ActionKind(case.action).value
    row.human_confirmed = bool(case.human_confirmed)
    row.evidence = case.evidence
    row.label_id = label_id
    row.diagnosis_id = diagnosis_id
    row.created_at = utcnow()  # this version of the case; also moves the cache fingerprint
    session.flush()
    return row


class DbCaseStore:
    def __init__(self, db: Database) -> None:
        self.db = db
        self._cache: dict[str, _Matrix] = {}
        self._lock = threading.Lock()

    def add(self, case: LabelledCase, *, label_id: int | None = None, diagnosis_id: int | None = None) -> None:
        self.db.run(upsert_case, case=case, label_id=label_id, diagnosis_id=diagnosis_id)
        with self._lock:
            self._cache.pop(case.embedder, None)

    def get(self, case_id: str) -> LabelledCase | None:
        with self.db.transaction() as session:
            row = session.scalar(select(LabelledCaseRow).where(LabelledCaseRow.case_id == case_id))
            return _to_case(row) if row is not None else None

    def __len__(self) -> int:
        with self.db.transaction() as session:
            return session.scalar(select(func.count()).select_from(LabelledCaseRow)) or 0

    def _matrix(self, session: Session, embedder: str) -> _Matrix:
        where = LabelledCaseRow.embedder == embedder
        fingerprint = tuple(session.execute(
            select(func.count(), func.max(LabelledCaseRow.id), func.max(LabelledCaseRow.created_at))
            .where(where)).one())
        with self._lock:
            cached = self._cache.get(embedder)
        if cached is not None and cached.fingerprint == fingerprint:
            return cached
        rows = session.execute(select(LabelledCaseRow.case_id, LabelledCaseRow.vector, LabelledCaseRow.dim)
                               .where(where).order_by(LabelledCaseRow.id)).all()
        dims = {dim for _, _, dim in rows}
        if len(dims) > 1:  # same model name, different sizes: keep the most common size
            dim = max(dims, key=lambda d: sum(1 for r in rows if r[2] == d))
            rows = [r for r in rows if r[2] == dim]
        ids = [case_id for case_id, _, _ in rows]
        matrix = (np.stack([np.frombuffer(v, dtype=np.float32) for _, v, _ in rows]) if rows
                  else np.zeros((0, 0), dtype=np.float32))
        built = _Matrix(fingerprint, ids, matrix)
        with self._lock:
            self._cache[embedder] = built
        return built

    def nearest(self, vector: np.ndarray, k: int, *, embedder: str,
                exclude: frozenset[str] = frozenset()) -> list[SimilarCase]:
        if k <= 0:
            return []
        query = np.asarray(vector, dtype=np.float32).reshape(-1)
        with self.db.transaction() as session:
            m = self._matrix(session, embedder)
            if not m.case_ids or m.matrix.shape[1] != query.shape[0]:
                return []
            sims = m.matrix @ query
            order = np.argsort(-sims, kind="stable")
            picked: list[tuple[str, float]] = []
            for i in order:
                if m.case_ids[i] in exclude:
                    continue
                picked.append((m.case_ids[i], float(sims[i])))
                if len(picked) >= k:
                    break
            if not picked:
                return []
            rows = {r.case_id: r for r in session.scalars(
                select(LabelledCaseRow).where(LabelledCaseRow.case_id.in_([c for c, _ in picked])))}
            return [SimilarCase(_to_case(rows[c]), s) for c, s in picked if c in rows]


@dataclass(frozen=True)
class _CaseInput:
    diagnosis_id: int
    label_id: int
    signature: str
    error_type: ErrorType
    category: Category
    action: ActionKind | None  # None: decide from the policies
    evidence: str | None


def _case_input(*, session: Session, diagnosis_id: int) -> _CaseInput | None:
    """What the newest label of a diagnosis says, with the failure signature to embed."""
    from app.diagnoses.models import DiagnosisRow
    from app.labels.models import Label, Verdict

    row = session.get(DiagnosisRow, diagnosis_id)
    label = session.scalar(select(Label).where(Label.diagnosis_id == diagnosis_id).order_by(Label.id.desc()).limit(1))
    if row is None or label is None:
        return None
    result = row.result or {}
    root = result.get("root_cause") or {}
    evidence_lines = [e.get("text", "") for e in root.get("evidence") or []]
    signature = row.failure_signature
    if not signature:  # diagnosed before signatures were stored: the root cause's evidence
        from app.llm.retrieval import normalise

        signature = "\n".join(f"{root.get('error_type', 'Unknown')}: {normalise(t)[:200]}" for t in evidence_lines[:6])
    confirmed = label.verdict == Verdict.CONFIRM.value and label.error_type == root.get("error_type")
    action = (result.get("action") or {}).get("kind") if confirmed else None
    evidence = evidence_lines[0][:2000] if confirmed and evidence_lines else (label.note or None)
    return _CaseInput(row.id, label.id, signature, ErrorType(label.error_type), Category(label.category),
                      ActionKind(action) if action else None, evidence)


class LabelCaseRecorder:
    """Adds a labelled diagnosis to the case store (human_confirmed=True), so that retrieval and
    the agent see it next time. Runs after the label is committed; failing here (the embedder
    cannot load, the store is busy) is logged and never loses the label."""

    def __init__(self, db: Database, embedder: Any, policies: Callable[[], list]) -> None:
        self.db = db
        self.store = DbCaseStore(db)
        self.embedder = embedder
        self.policies = policies

    @staticmethod
    def case_id(diagnosis_id: int) -> str:
        return f"diagnosis-{diagnosis_id}"

    def record(self, diagnosis_id: int) -> bool:
        try:
            data = self.db.run(_case_input, diagnosis_id=diagnosis_id)
            if data is None:
                return False
            action = data.action
            if action is None:
                from app.core.policy import PolicyContext, decide

                action = decide(PolicyContext(error_type=data.error_type, category=data.category, confidence=1.0),
                                self.policies()).kind
            vector = self.embedder.embed([data.signature or "(empty log)"])[0]
            case = LabelledCase(self.case_id(diagnosis_id), data.signature, vector, data.error_type, data.category,
                                action, True, data.evidence, self.embedder.name)
            self.store.add(case, label_id=data.label_id, diagnosis_id=data.diagnosis_id)
            return True
        except Exception as exc:  # noqa: BLE001 - the label is stored; the case can be added later
            log.warning("label of diagnosis %s was not added to the case store: %r", diagnosis_id, exc)
            return False

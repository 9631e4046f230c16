"""'What would this rule change do?': diagnose a set of logs with two rule libraries and report
the difference (`logdx rules diff OLD_DIR NEW_DIR --logs DIR`). No database: it runs before a
change is approved, on any machine. One spawned process per core, each holding both compiled
libraries and diagnosing one log at a time (memory bounded by the ingest chunk)."""

from __future__ import annotations

import multiprocessing
import shutil
import tempfile
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import ProcessPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from app.core.ingest import InputError
from app.core.pipeline import Pipeline
from app.relabel.archive import ArchiveFile
from app.relabel.report import Outcome

CORRUPT_MARK = "stream is corrupt"


@dataclass(frozen=True)
class _Side:
    error_type: str
    rule_id: str | None
    confidence: float


_PIPELINES: tuple[Pipeline, Pipeline] | None = None


def _init(old_dir: str, new_dir: str) -> None:
    global _PIPELINES
    _PIPELINES = (Pipeline(rules_dir=old_dir), Pipeline(rules_dir=new_dir))


def _side(pipeline: Pipeline, path: str) -> _Side:
    d = pipeline.diagnose(path, workers=1).diagnosis
    corrupt = [w for w in d.compression.warnings if CORRUPT_MARK in w]
    if corrupt:
        raise InputError(f"corrupt archive: {corrupt[0]}")
    return _Side(d.root_cause.error_type.value, d.root_cause.rule_id, d.root_cause.confidence)


def diff_one(path: str, pipelines: tuple[Pipeline, Pipeline] | None = None) -> tuple[_Side, _Side] | str:
    """Both diagnoses of one log, or why it could not be read."""
    old, new = pipelines or _PIPELINES
    try:
        return _side(old, path), _side(new, path)
    except (InputError, OSError) as exc:
        return f"unreadable: {exc}"


def _outcome(f: ArchiveFile, result: tuple[_Side, _Side] | str, old_version: str) -> Outcome:
    if isinstance(result, str):
        return Outcome(key=f.external_id, ok=False, path=f.path, human_error_type=f.human_error_type, error=result)
    old, new = result
    return Outcome(key=f.external_id, ok=True, path=f.path, old_error_type=old.error_type, old_rule_id=old.rule_id,
                   old_rules_version=old_version, new_error_type=new.error_type, new_rule_id=new.rule_id,
                   new_confidence=new.confidence, human_error_type=f.human_error_type)


def diff_rules(*, old_dir: Path, new_dir: Path, files: Iterable[ArchiveFile], workers: int,
               on_result: Callable[[ArchiveFile], None] | None = None) -> tuple[list[Outcome], str, str]:
    """(one outcome per file, in order; old rules version; new rules version). Raises RuleError
    when either library does not load."""
    files = list(files)
    old_p, new_p = Pipeline(rules_dir=old_dir), Pipeline(rules_dir=new_dir)  # fail fast here, not in a worker
    versions = old_p.ruleset.version, new_p.ruleset.version
    out: list[Outcome] = []
    if workers <= 1 or len(files) <= 1:
        for f in files:
            out.append(_outcome(f, diff_one(f.path, (old_p, new_p)), versions[0]))
            if on_result:
                on_result(f)
        return out, *versions
    with ProcessPoolExecutor(max_workers=workers, mp_context=multiprocessing.get_context("spawn"),
                             initializer=_init, initargs=(str(old_dir), str(new_dir))) as pool:
        for f, result in zip(files, pool.map(diff_one, [f.path for f in files], chunksize=2), strict=True):
            out.append(_outcome(f, result, versions[0]))
            if on_result:
                on_result(f)
    return out, *versions


@contextmanager
def library_with_rule(rules_dir: Path, *, kind: str, family: str, rule: dict) -> Iterator[Path]:
    """A temporary copy of `rules_dir` with `rule` appended to `<family>.yaml`, as approval
    would write it (the library itself is not touched)."""
    from app.errors import InvalidInput
    from app.rules_review.rulefiles import FAMILY, render_with_rule

    if not FAMILY.match(family or ""):
        raise InvalidInput(f"rule family {family!r} is not a valid file name", code="invalid_rule")
    with tempfile.TemporaryDirectory(prefix="logdx-whatif-") as tmp:
        trial = Path(tmp) / "rules"
        shutil.copytree(rules_dir, trial, ignore=shutil.ignore_patterns(".*"))
        target = trial / f"{family}.yaml"
        existing = target.read_text(encoding="utf-8") if target.exists() else None
        target.write_text(render_with_rule(existing, kind=kind, family=family, rule=rule), encoding="utf-8")
        yield trial


def diff_stored(refs: Iterable[StoredLog], *, old: Pipeline, new: Pipeline) -> list[Outcome]:
    """Both diagnoses of stored logs (in this thread: a bounded sample for a review page)."""
    out = []
    for ref in refs:
        result = diff_one(ref.path, (old, new)) if ref.path else "unreadable: the log is still being received"
        if isinstance(result, str):
            out.append(Outcome(key=ref.key, ok=False, job_id=ref.job_id, human_error_type=ref.human_error_type,
                               error=result))
            continue
        before, after = result
        out.append(Outcome(key=ref.key, ok=True, job_id=ref.job_id, old_error_type=before.error_type,
                           old_rule_id=before.rule_id, old_rules_version=old.ruleset.version,
                           new_error_type=after.error_type, new_rule_id=after.rule_id,
                           new_confidence=after.confidence, human_error_type=ref.human_error_type))
    return out


@dataclass(frozen=True)
class StoredLog:
    key: str
    job_id: int
    path: str | None  # None: an open chunked log
    human_error_type: str | None

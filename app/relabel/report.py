"""The diff report of a re-labeling run or of a rule change: pure data in, pure data out (no
database), so `logdx relabel`, the API and `logdx rules diff` build the same report.

- `transitions`: the old → new error-type matrix (`(new)` when a log had no diagnosis before);
- `by_rules_version`: per rules version that made the old diagnoses, how many logs and how many
  changed; `by_rule`: per rule id, how many changed logs it lost and gained as root cause;
- `changed`: the logs whose root-cause type or rule changed, with links;
- `human`: agreement with human labels before and after; a log that agreed before and disagrees
  now is a *regression* of the rules (the label itself is never touched);
- `failed`: logs that could not be read (corrupt archive, unreadable file), skipped.
"""

from __future__ import annotations

import csv
import io
from collections import Counter, defaultdict
from collections.abc import Iterable
from dataclasses import dataclass

from pydantic import BaseModel, Field

NEW = "(new)"  # row key of the matrix for logs that had no diagnosis before


@dataclass(frozen=True)
class Outcome:
    """One log before and after. `new_*` are None for a failed log."""

    key: str  # job id or file path: what a person recognises
    ok: bool
    job_id: int | None = None
    path: str | None = None
    old_diagnosis_id: int | None = None
    old_error_type: str | None = None
    old_rule_id: str | None = None
    old_rules_version: str | None = None
    new_diagnosis_id: int | None = None
    new_error_type: str | None = None
    new_rule_id: str | None = None
    new_confidence: float | None = None
    human_error_type: str | None = None
    error: str | None = None

    @property
    def is_new(self) -> bool:
        """Never diagnosed before (an imported log, a job whose diagnosis never ran)."""
        return self.old_diagnosis_id is None and self.old_error_type is None

    @property
    def changed(self) -> bool:
        return self.ok and not self.is_new and (self.old_error_type != self.new_error_type
                                                or self.old_rule_id != self.new_rule_id)


class ChangedLog(BaseModel):
    key: str
    job_id: int | None = None
    path: str | None = None
    old_error_type: str | None
    new_error_type: str | None
    old_rule_id: str | None
    new_rule_id: str | None
    new_confidence: float | None = None
    human_error_type: str | None = None
    links: dict[str, str] = Field(default_factory=dict, description="API paths of the job and diagnoses")


class VersionCount(BaseModel):
    rules_version: str
    logs: int
    changed: int


class RuleCount(BaseModel):
    rule_id: str
    lost: int = Field(description="changed logs it no longer explains")
    gained: int = Field(description="changed logs it now explains")


class HumanAgreement(BaseModel):
    labelled: int = Field(description="logs with a human label")
    agree_before: int = Field(description="labelled logs whose old diagnosis agreed with the label")
    agree_after: int = Field(description="labelled logs whose new diagnosis agrees with the label")
    regressions: list[ChangedLog] = Field(description="agreed with the human label before, disagree now")
    fixed: list[ChangedLog] = Field(description="disagreed before, agree now")
    disagree_after: list[ChangedLog] = Field(description="every log whose new root cause differs from its label")


class FailedLog(BaseModel):
    key: str
    job_id: int | None = None
    path: str | None = None
    error: str


class DiffReport(BaseModel):
    schema_: str = Field("logdx.relabel-report/v1", alias="schema")
    logs: int
    done: int
    failed: int
    changed: int
    unchanged: int
    new: int = Field(description="logs that had no diagnosis before")
    rules_version: str | None = Field(description="rules version of the new diagnoses")
    transitions: dict[str, dict[str, int]] = Field(description="old error type → new error type → logs")
    by_rules_version: list[VersionCount]
    by_rule: list[RuleCount]
    changed_logs: list[ChangedLog]
    human: HumanAgreement
    failed_logs: list[FailedLog]

    model_config = {"populate_by_name": True}


def _links(o: Outcome) -> dict[str, str]:
    links = {}
    if o.job_id is not None:
        links["job"] = f"/v1/jobs/{o.job_id}"
    if o.old_diagnosis_id is not None:
        links["old_diagnosis"] = f"/v1/diagnoses/{o.old_diagnosis_id}"
    if o.new_diagnosis_id is not None:
        links["new_diagnosis"] = f"/v1/diagnoses/{o.new_diagnosis_id}"
    return links


def _changed_log(o: Outcome) -> ChangedLog:
    return ChangedLog(key=o.key, job_id=o.job_id, path=o.path, old_error_type=o.old_error_type,
                      new_error_type=o.new_error_type, old_rule_id=o.old_rule_id, new_rule_id=o.new_rule_id,
                      new_confidence=o.new_confidence, human_error_type=o.human_error_type, links=_links(o))


def build_report(outcomes: Iterable[Outcome], *, rules_version: str | None, max_listed: int = 10_000) -> DiffReport:
    """`max_listed` bounds the per-log lists (the counts always cover every log)."""
    transitions: dict[str, Counter] = defaultdict(Counter)
    versions: dict[str, list[int]] = defaultdict(lambda: [0, 0])
    lost: Counter = Counter()
    gained: Counter = Counter()
    changed: list[ChangedLog] = []
    failed: list[FailedLog] = []
    regressions: list[ChangedLog] = []
    fixed: list[ChangedLog] = []
    disagree: list[ChangedLog] = []
    n = done = n_failed = n_changed = n_new = labelled = agree_before = agree_after = 0
    for o in outcomes:
        n += 1
        if not o.ok:
            n_failed += 1
            if len(failed) < max_listed:
                failed.append(FailedLog(key=o.key, job_id=o.job_id, path=o.path, error=o.error or "failed"))
            continue
        done += 1
        old = NEW if o.is_new else (o.old_error_type or "?")
        n_new += o.is_new
        transitions[old][o.new_error_type or "?"] += 1
        if old != NEW:
            counts = versions[o.old_rules_version or "?"]
            counts[0] += 1
            counts[1] += o.changed
        if o.changed:
            n_changed += 1
            if o.old_rule_id != o.new_rule_id:
                if o.old_rule_id:
                    lost[o.old_rule_id] += 1
                if o.new_rule_id:
                    gained[o.new_rule_id] += 1
            if len(changed) < max_listed:
                changed.append(_changed_log(o))
        if o.human_error_type:
            labelled += 1
            before = not o.is_new and o.old_error_type == o.human_error_type
            after = o.new_error_type == o.human_error_type
            agree_before += before
            agree_after += after
            entry = _changed_log(o)
            if not after and len(disagree) < max_listed:
                disagree.append(entry)
            if before and not after:
                regressions.append(entry)
            elif after and not before and not o.is_new:
                fixed.append(entry)
    return DiffReport(
        logs=n, done=done, failed=n_failed, changed=n_changed, unchanged=done - n_changed, new=n_new,
        rules_version=rules_version,
        transitions={old: dict(sorted(new.items())) for old, new in sorted(transitions.items())},
        by_rules_version=[VersionCount(rules_version=v, logs=c[0], changed=c[1]) for v, c in sorted(versions.items())],
        by_rule=[RuleCount(rule_id=r, lost=lost[r], gained=gained[r]) for r in sorted(set(lost) | set(gained))],
        changed_logs=changed,
        human=HumanAgreement(labelled=labelled, agree_before=agree_before, agree_after=agree_after,
                             regressions=regressions[:max_listed], fixed=fixed[:max_listed],
                             disagree_after=disagree),
        failed_logs=failed)


CSV_COLUMNS = ("key", "job_id", "path", "status", "changed", "old_error_type", "new_error_type", "old_rule_id",
               "new_rule_id", "new_confidence", "human_error_type", "human_agrees_before", "human_agrees_after",
               "old_rules_version", "old_diagnosis", "new_diagnosis", "error")


def outcomes_csv(outcomes: Iterable[Outcome]) -> str:
    """One row per log: the spreadsheet view of a run (the JSON report holds the aggregates)."""
    buf = io.StringIO()
    writer = csv.writer(buf, lineterminator="\n")
    writer.writerow(CSV_COLUMNS)
    for o in outcomes:
        human = o.human_error_type
        writer.writerow([
            o.key, o.job_id if o.job_id is not None else "", o.path or "", "done" if o.ok else "failed",
            int(o.changed), o.old_error_type or "", o.new_error_type or "", o.old_rule_id or "", o.new_rule_id or "",
            "" if o.new_confidence is None else f"{o.new_confidence:.3f}", human or "",
            "" if not human else int(o.old_error_type == human), "" if not human or not o.ok else int(o.new_error_type == human),
            o.old_rules_version or "", o.old_diagnosis_id or "", o.new_diagnosis_id or "", o.error or ""])
    return buf.getvalue()

"""Rule files (`rules/*.yaml`): schema, loading and compilation.

Three kinds of rule live in `rules/`:
- diagnosis rules (`kind: diagnosis`, one file per log family): a regex that turns a line into a
  typed error event;
- filter rules (`kind: filter`): a regex that marks a line as metric/progress/chatter so that
  compression can drop it (optionally extracting step/loss/... as a metric series);
- policies (`kind: policy`): error type (+ condition) -> action.

Everything is validated and compiled at load time; a bad rule raises `RuleError` naming the file,
the rule id and the pattern as written. Nothing falls back silently.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from enum import StrEnum
from pathlib import Path
from typing import Annotated, Literal

import regex
import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from app.core.types import ActionKind, Category, ErrorType, Role, default_category

DEFAULT_RULES_DIR = Path(__file__).resolve().parents[2] / "rules"
GROUP_NAMES = {"rank", "host", "gpu", "xid", "exc", "pid", "node", "local_rank", "signal",
               "step", "loss", "grad_norm", "loss_scale", "lr", "throughput", "time", "detail"}
DEFAULT_PRIORITY = {Role.CAUSE: 50, Role.WRAPPER: 20, Role.SYMPTOM: 10}
MATCH_TIMEOUT_S = 0.05
_YAML_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)  # libyaml when built: 10x faster


class RuleError(ValueError):
    """A rule file is malformed; the message names file, rule id and pattern."""


class FilterKind(StrEnum):
    METRIC = "metric"
    PROGRESS = "progress"
    INIT = "init"
    CHATTER = "chatter"
    WARNING = "warning"


class Examples(BaseModel):
    model_config = ConfigDict(extra="forbid")
    match: list[str] = Field(min_length=1)
    no_match: list[str] = Field(default_factory=list)


class _RuleBase(BaseModel):
    model_config = ConfigDict(extra="forbid")
    id: Annotated[str, Field(pattern=r"^[a-z0-9][a-z0-9_.-]*$")]
    pattern: str
    ignore_case: bool = False
    hint: str | None = None
    examples: Examples


class DiagnosisRuleSpec(_RuleBase):
    error_type: ErrorType
    category: Category | None = None
    role: Role = Role.CAUSE
    priority: int | None = Field(default=None, ge=0, le=100)
    action: ActionKind | None = None
    # a named group whose captured exception class name, when canonical, becomes the type
    type_from_group: str | None = None


class FilterRuleSpec(_RuleBase):
    filter: FilterKind
    # named groups (step, loss, ...) are extracted as a metric series when true
    extract: bool = False
    # the line marks training progress (last-progress marker for hang detection)
    progress: bool = False
    # the line says training finished normally (needs progress: true): a log without an error
    # after it is reported as no failure, not as a hang
    completion: bool = False


class PolicySpec(BaseModel):
    model_config = ConfigDict(extra="forbid")
    id: Annotated[str, Field(pattern=r"^[a-z0-9][a-z0-9_.-]*$")]
    error_type: ErrorType | None = None
    category: Category | None = None
    when: list[str] = Field(default_factory=list)
    # a regex one of the lines up to the root cause must match (its own line included): the
    # job's own step that explains the error, e.g. rank 0 tokenizing before a collective timeout
    preceded_by: str | None = None
    action: ActionKind
    reason: str

    @field_validator("when")
    @classmethod
    def _known_conditions(cls, value: list[str]) -> list[str]:
        from app.core.policy import CONDITIONS

        unknown = [c for c in value if c not in CONDITIONS]
        if unknown:
            raise ValueError(f"unknown condition(s) {unknown}; known: {sorted(CONDITIONS)}")
        return value

    @field_validator("preceded_by")
    @classmethod
    def _compiles(cls, value: str | None) -> str | None:
        if value is not None:
            regex.compile(value)
        return value


class RuleFile(BaseModel):
    model_config = ConfigDict(extra="forbid")
    kind: Literal["diagnosis", "filter", "policy"]
    family: str
    description: str | None = None
    rules: list[DiagnosisRuleSpec] | list[FilterRuleSpec] | list[PolicySpec] = Field(default_factory=list)


@dataclass(frozen=True)
class CompiledRule:
    """A validated rule spec, the file it came from and its compiled pattern."""

    spec: _RuleBase
    source: str
    regex: regex.Pattern

    @property
    def id(self) -> str:
        return self.spec.id


@dataclass(frozen=True)
class DiagnosisRule(CompiledRule):
    spec: DiagnosisRuleSpec

    @property
    def priority(self) -> int:
        return self.spec.priority if self.spec.priority is not None else DEFAULT_PRIORITY[self.spec.role]

    @property
    def category(self) -> Category:
        return self.spec.category or default_category(self.spec.error_type)


@dataclass(frozen=True)
class FilterRule(CompiledRule):
    spec: FilterRuleSpec


@dataclass
class RuleSet:
    diagnosis: list[DiagnosisRule] = field(default_factory=list)
    filters: list[FilterRule] = field(default_factory=list)
    policies: list[PolicySpec] = field(default_factory=list)
    version: str = ""
    files: list[str] = field(default_factory=list)

    def diagnosis_by_id(self) -> dict[str, DiagnosisRule]:
        return {r.id: r for r in self.diagnosis}


def compile_pattern(pattern: str, *, ignore_case: bool = False, where: str = "") -> regex.Pattern:
    flags = regex.IGNORECASE if ignore_case else 0
    try:
        return regex.compile(pattern, flags)
    except regex.error as exc:
        raise RuleError(f"{where}: pattern does not compile ({exc}): {pattern!r}") from None


def _check_groups(compiled: regex.Pattern, where: str, pattern: str) -> None:
    unknown = set(compiled.groupindex) - GROUP_NAMES
    if unknown:
        raise RuleError(f"{where}: unknown named group(s) {sorted(unknown)} in {pattern!r}; "
                        f"allowed: {sorted(GROUP_NAMES)}")


# Files of these kinds live in rules/ too but belong to the restart controller, which loads them.
OTHER_KINDS = frozenset({"recovery", "probes"})


def _load_file(path: Path) -> RuleFile | None:
    try:
        raw = yaml.load(path.read_text(encoding="utf-8"), Loader=_YAML_LOADER)
    except yaml.YAMLError as exc:
        raise RuleError(f"{path.name}: not valid YAML: {exc}") from None
    if not isinstance(raw, dict):
        raise RuleError(f"{path.name}: expected a mapping with kind/family/rules")
    kind = raw.get("kind")
    if kind in OTHER_KINDS:
        return None
    model = {"diagnosis": DiagnosisRuleSpec, "filter": FilterRuleSpec, "policy": PolicySpec}.get(kind)
    if model is None:
        raise RuleError(f"{path.name}: kind must be diagnosis, filter or policy, got {kind!r}")
    rules_raw = raw.get("rules") or []
    if not isinstance(rules_raw, list):
        raise RuleError(f"{path.name}: 'rules' must be a list")
    specs = []
    for i, item in enumerate(rules_raw):
        rid = item.get("id", f"#{i}") if isinstance(item, dict) else f"#{i}"
        try:
            specs.append(model.model_validate(item))
        except ValidationError as exc:
            pattern = item.get("pattern") if isinstance(item, dict) else None
            errs = "; ".join(f"{'.'.join(map(str, e['loc']))}: {e['msg']}" for e in exc.errors())
            raise RuleError(f"{path.name}: rule {rid}: {errs}" + (f" (pattern {pattern!r})" if pattern else "")) from None
    header = {k: v for k, v in raw.items() if k != "rules"}
    try:
        return RuleFile.model_validate({**header, "rules": []}).model_copy(update={"rules": specs})
    except ValidationError as exc:
        raise RuleError(f"{path.name}: {exc.errors()[0]['loc']}: {exc.errors()[0]['msg']}") from None


def load_rules(rules_dir: Path | str | None = None, *, extra_files: list[Path] | None = None) -> RuleSet:
    """Load, validate and compile every `*.yaml` under `rules_dir` (recursively)."""
    root = Path(rules_dir) if rules_dir else DEFAULT_RULES_DIR
    if not root.is_dir():
        raise RuleError(f"rules directory not found: {root}")
    paths = sorted(root.rglob("*.yaml")) + list(extra_files or [])
    digest = hashlib.sha256()
    ruleset = RuleSet()
    seen: dict[str, str] = {}
    for path in paths:
        rf = _load_file(path)
        if rf is None:
            continue
        digest.update(path.name.encode() + b"\0" + path.read_bytes())
        rel = str(path.relative_to(root)) if path.is_relative_to(root) else path.name
        ruleset.files.append(rel)
        for spec in rf.rules:
            where = f"{rel}: rule {spec.id}"
            if spec.id in seen:
                raise RuleError(f"{where}: duplicate id (also in {seen[spec.id]})")
            seen[spec.id] = rel
            if isinstance(spec, PolicySpec):
                ruleset.policies.append(spec)
                continue
            compiled = compile_pattern(spec.pattern, ignore_case=spec.ignore_case, where=where)
            _check_groups(compiled, where, spec.pattern)
            if isinstance(spec, DiagnosisRuleSpec):
                if spec.type_from_group and spec.type_from_group not in compiled.groupindex:
                    raise RuleError(f"{where}: type_from_group {spec.type_from_group!r} is not a group of {spec.pattern!r}")
                ruleset.diagnosis.append(DiagnosisRule(spec, rel, compiled))
            else:
                ruleset.filters.append(FilterRule(spec, rel, compiled))
    ruleset.version = digest.hexdigest()[:12]
    return ruleset


@dataclass
class ExampleFailure:
    rule_id: str
    source: str
    example: str
    expected_match: bool


def check_examples(ruleset: RuleSet) -> list[ExampleFailure]:
    """Run every rule's `match`/`no_match` examples; return the failures (empty = all pass)."""
    failures: list[ExampleFailure] = []
    for rule in [*ruleset.diagnosis, *ruleset.filters]:
        for text in rule.spec.examples.match:
            if not rule.regex.search(text, timeout=1.0):
                failures.append(ExampleFailure(rule.id, rule.source, text, True))
        for text in rule.spec.examples.no_match:
            if rule.regex.search(text, timeout=1.0):
                failures.append(ExampleFailure(rule.id, rule.source, text, False))
    return failures

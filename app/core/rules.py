"""Rule files (`rules/*.yaml`): loading, validation and compilation (the schema of a rule is
`app/core/rule_specs.py`).

Three kinds of rule live in `rules/`:
- diagnosis rules (`kind: diagnosis`, one file per log family): a regex that turns a line into a
  typed error event;
- filter rules (`kind: filter`): a regex that marks a line as metric/progress/chatter so that
  compression can drop it (optionally extracting step/loss/... as a metric series);
- policies (`kind: policy`): error type (+ condition) -> action.

Everything is validated and compiled at load time; a bad rule raises `RuleError` naming the file,
the rule id and the pattern as written. Nothing falls back silently.

Start-up cost matters (a Slurm epilog runs `logdx` once per job): a validated rule set is cached
(pickled, keyed by the SHA-256 of the rule files and of this schema's code) under
`$LOGDX_RULES_CACHE_DIR` (default `$XDG_CACHE_HOME/logdx/rules`, else `~/.cache/logdx/rules`;
`off` disables it). A cold cache runs the full validation; a warm one skips YAML parsing and
pydantic validation, and patterns are compiled with `regex` on first use (they compiled when the
cache was written). The rule specs are plain dataclasses, so a warm cache imports no pydantic.
"""

from __future__ import annotations

import hashlib
import os
import pickle
from dataclasses import dataclass, field, replace
from pathlib import Path
from types import EllipsisType

import regex

from app import resources
from app.core import regexcache
from app.core.rule_specs import (  # noqa: F401 - the specs are part of this module's interface
    DiagnosisRuleSpec, Examples, ExceptionEntrySpec, FilterKind, FilterRuleSpec, PolicySpec, RuleFile, SubsystemSpec,
    _RuleBase,
)
from app.core.types import Category, Role, default_category
from app.core.validation import error_message, validate


def __getattr__(name: str):  # DEFAULT_RULES_DIR, found on first use (app/resources.py)
    if name == "DEFAULT_RULES_DIR":
        return resources.rules_dir()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


GROUP_NAMES = {"rank", "host", "gpu", "xid", "exc", "pid", "node", "local_rank", "signal",
               "step", "loss", "grad_norm", "loss_scale", "lr", "throughput", "time", "detail", "skipped"}
DEFAULT_PRIORITY = {Role.CAUSE: 50, Role.WRAPPER: 20, Role.SYMPTOM: 10}
MATCH_TIMEOUT_S = 0.05
# A `regex` search's timeout is wall-clock time: it bounds a pattern that backtracks on a line,
# but it also runs out while the process waits for a CPU (a loaded host, a busy server). A search
# that ran out of the short bound is tried once more under the long one before a match is given
# up; a pattern that runs out of the long bound this many times is given the short bound only
# from then on, so one backtracking rule cannot make every line cost the long bound.
MATCH_RETRY_TIMEOUT_S = 2.0
MATCH_RETRY_LIMIT = 3
_LONG_TIMEOUTS: dict[tuple[str, int], int] = {}
CACHE_FORMAT = 3


def bounded_search(rx: regex.Pattern, text: str) -> regex.Match | None:
    """`rx.search(text)` under `MATCH_TIMEOUT_S`, once more under `MATCH_RETRY_TIMEOUT_S` when that
    ran out (see there); raises TimeoutError when the pattern ran out of both."""
    try:
        return rx.search(text, timeout=MATCH_TIMEOUT_S)
    except TimeoutError:
        key = (rx.pattern, rx.flags)
        if _LONG_TIMEOUTS.get(key, 0) >= MATCH_RETRY_LIMIT:
            raise
    try:
        return rx.search(text, timeout=MATCH_RETRY_TIMEOUT_S)
    except TimeoutError:
        _LONG_TIMEOUTS[key] = _LONG_TIMEOUTS.get(key, 0) + 1
        raise


def bounded_match(rx: regex.Pattern, text: str, *, timed_out: bool) -> bool:
    """Whether `rx` matches `text` (`bounded_search`); `timed_out` is the answer for a line the
    pattern ran out of time on (what the caller can afford to assume)."""
    try:
        return bounded_search(rx, text) is not None
    except TimeoutError:
        return timed_out


class RuleError(ValueError):
    """A rule file is malformed; the message names file, rule id and pattern."""


class LazyPattern:
    """A validated pattern compiled with `regex` on first use: `pattern`, `flags` and the RE2
    form need no compilation (the multi-pattern matcher runs most lines through RE2). `args` are
    its cached compile arguments (app/core/regexcache.py): first use is then one C call."""

    __slots__ = ("pattern", "flags", "re2_text", "digit_form", "args", "_compiled")

    def __init__(self, pattern: str, flags: int, re2_text: str | None, compiled: regex.Pattern | None = None,
                 digit_form: tuple[str, str] | None | EllipsisType = ...,
                 args: regexcache.CompileArgs | None = None) -> None:
        self.pattern = pattern
        self.flags = flags
        self.re2_text = re2_text  # the pattern as the RE2 set runs it (set_form), None when RE2 cannot
        self.digit_form = digit_form  # a diagnosis rule's keptshapes.digit_form (`...`: not computed)
        self.args = args
        self._compiled = compiled

    @property
    def compiled(self) -> regex.Pattern:
        if self._compiled is None:
            self._compiled = regexcache.build(self.args, self.pattern, self.flags)
        return self._compiled

    def __getstate__(self):
        return (self.pattern, self.flags, self.re2_text, self.digit_form, self.args)

    def __setstate__(self, state) -> None:
        self.pattern, self.flags, self.re2_text, self.digit_form, self.args = state
        self._compiled = None

    def search(self, *args, **kwargs):
        return self.compiled.search(*args, **kwargs)

    def sub(self, *args, **kwargs):
        return self.compiled.sub(*args, **kwargs)

    @property
    def groupindex(self):
        return self.compiled.groupindex

    def __getattr__(self, name: str):  # the rest of regex.Pattern (match, finditer, ...)
        if name.startswith("__"):
            raise AttributeError(name)
        return getattr(self.compiled, name)

    def __repr__(self) -> str:
        return f"LazyPattern({self.pattern!r})"


@dataclass(frozen=True)
class CompiledRule:
    """A validated rule spec, the file it came from and its compiled pattern."""

    spec: _RuleBase
    source: str
    regex: LazyPattern

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
    exceptions: list[ExceptionEntrySpec] = field(default_factory=list)  # the exception table
    subsystems: list[SubsystemSpec] = field(default_factory=list)  # the vocabulary fallback
    version: str = ""
    files: list[str] = field(default_factory=list)

    def diagnosis_by_id(self) -> dict[str, DiagnosisRule]:
        return {r.id: r for r in self.diagnosis}

    def matchers(self):
        """(filters, diagnosis) multi-pattern matchers, built once per rule set."""
        from app.core.matcher import MultiMatcher

        return self.derived("matchers", lambda: (MultiMatcher(self.filters),
                                                 MultiMatcher(self.diagnosis, prefiltered=True)))

    def derived(self, name: str, build):
        """A value computed from the rules once per rule set (not pickled, not compared)."""
        cache = self.__dict__.setdefault("_derived", {})
        if name not in cache:
            cache[name] = build()
        return cache[name]

    def __getstate__(self):
        return {k: v for k, v in self.__dict__.items() if k != "_derived"}


def compile_pattern(pattern: str, *, ignore_case: bool = False, where: str = "") -> regex.Pattern:
    return compile_pattern_args(pattern, ignore_case=ignore_case, where=where)[0]


def compile_pattern_args(pattern: str, *, ignore_case: bool = False,
                         where: str = "") -> tuple[regex.Pattern, regexcache.CompileArgs | None]:
    """The compiled pattern and its compile arguments for the rules cache."""
    flags = regex.IGNORECASE if ignore_case else 0
    try:
        return regexcache.compile_with_args(pattern, flags)
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
    import yaml  # only a cold rules cache parses YAML

    loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)  # libyaml when built: 10x faster
    try:
        raw = yaml.load(path.read_text(encoding="utf-8"), Loader=loader)
    except yaml.YAMLError as exc:
        raise RuleError(f"{path.name}: not valid YAML: {exc}") from None
    if not isinstance(raw, dict):
        raise RuleError(f"{path.name}: expected a mapping with kind/family/rules")
    kind = raw.get("kind")
    if kind in OTHER_KINDS:
        return None
    model = {"diagnosis": DiagnosisRuleSpec, "filter": FilterRuleSpec, "policy": PolicySpec,
             "exceptions": ExceptionEntrySpec, "subsystems": SubsystemSpec}.get(kind)
    if model is None:
        raise RuleError(f"{path.name}: kind must be diagnosis, filter, policy, exceptions or subsystems, got {kind!r}")
    rules_raw = raw.get("rules") or []
    if not isinstance(rules_raw, list):
        raise RuleError(f"{path.name}: 'rules' must be a list")
    from pydantic import ValidationError  # only a cold rules cache validates

    specs = []
    for i, item in enumerate(rules_raw):
        rid = item.get("id", f"#{i}") if isinstance(item, dict) else f"#{i}"
        try:
            specs.append(validate(model, item))
        except ValidationError as exc:
            pattern = item.get("pattern") if isinstance(item, dict) else None
            errs = "; ".join(f"{'.'.join(map(str, e['loc']))}: {error_message(e)}" for e in exc.errors())
            raise RuleError(f"{path.name}: rule {rid}: {errs}" + (f" (pattern {pattern!r})" if pattern else "")) from None
    header = {k: v for k, v in raw.items() if k != "rules"}
    try:
        return replace(validate(RuleFile, {**header, "rules": []}), rules=specs)
    except ValidationError as exc:
        raise RuleError(f"{path.name}: {exc.errors()[0]['loc']}: {error_message(exc.errors()[0])}") from None


def _schema_digest() -> bytes:
    """What the cached form depends on besides the rule files: the code that validates them."""
    here = Path(__file__).resolve().parent
    # (the cached compile arguments are the `regex` version's own program)
    digest = hashlib.sha256(f"{CACHE_FORMAT}:{pickle.HIGHEST_PROTOCOL}:{regexcache.VERSION}".encode())
    for name in ("rules.py", "rule_specs.py", "types.py", "validation.py", "policy.py", "matcher.py", "setform.py",
                 "keptshapes.py", "regexcache.py"):
        digest.update((here / name).read_bytes())
    return digest.digest()


def _read_cache(path: Path) -> RuleSet | None:
    try:
        with open(path, "rb") as fh:
            cached = pickle.load(fh)
    except FileNotFoundError:
        return None
    except Exception:  # a torn or foreign file: rebuilt from the rule files below
        return None
    return cached if isinstance(cached, RuleSet) else None


def _write_cache(path: Path, ruleset: RuleSet) -> None:
    if regexcache.write_pickle(path, ruleset, ".rules-"):
        _prune_cache(path.parent, keep=path)


CACHE_KEEP = 16  # cached rule sets kept per cache directory (the most recently written)


def _prune_cache(directory: Path, keep: Path) -> None:
    """Old rule sets (edited rules, other directories) would pile up: keep the newest few."""
    try:
        others = sorted((p for p in directory.glob("*.pickle") if p != keep),
                        key=lambda p: p.stat().st_mtime, reverse=True)
        for old in others[CACHE_KEEP - 1:]:
            old.unlink(missing_ok=True)
    except OSError:  # another process pruned first
        pass


OVERLAY_ENV = "LOGDX_RULES_OVERLAY"


def overlay_from_env() -> Path | None:
    """The site's overlay directory named by $LOGDX_RULES_OVERLAY (unset or empty: none)."""
    value = os.environ.get(OVERLAY_ENV, "").strip()
    return Path(value).expanduser() if value else None


def load_rules(rules_dir: Path | str | None = None, *, extra_files: list[Path] | None = None,
               overlay: Path | str | None | EllipsisType = ...) -> RuleSet:
    """Load, validate and compile every `*.yaml` under `rules_dir` (recursively; unset: the
    rules shipped with logdx), then under `overlay`, a site's own rule files loaded beside them
    (`...`: $LOGDX_RULES_OVERLAY; None: no overlay). A rule id defined twice, within or across
    the two, is an error naming both files. From the rules cache when the files and the schema
    code are unchanged."""
    if rules_dir:
        root = Path(rules_dir)
    else:
        try:
            root = resources.rules_dir()
        except resources.DataNotFound as exc:
            raise RuleError(str(exc)) from None
    if not root.is_dir():
        raise RuleError(f"rules directory not found: {root}")
    extra = sorted(root.rglob("*.yaml")) + list(extra_files or [])
    overlay_root = overlay_from_env() if overlay is ... else (Path(overlay) if overlay else None)
    if overlay_root is not None:
        if not overlay_root.is_dir():
            raise RuleError(f"rules overlay directory not found: {overlay_root} ({OVERLAY_ENV})")
        if overlay_root.resolve() == root.resolve():
            raise RuleError(f"the rules overlay {overlay_root} is the rules directory itself")
        extra += [p.resolve() for p in sorted(overlay_root.rglob("*.yaml"))]
    paths = extra
    digest = hashlib.sha256()  # of every file: the cache key (the version covers rule files only)
    for path in paths:
        digest.update(path.name.encode() + b"\0" + path.read_bytes())
    cache_dir = regexcache.cache_dir()
    cache_path = None
    if cache_dir is not None:
        where = str(root.resolve()) + ("\0" + str(overlay_root.resolve()) if overlay_root is not None else "")
        key = hashlib.sha256(_schema_digest() + digest.digest() + where.encode()).hexdigest()[:32]
        cache_path = cache_dir / f"{key}.pickle"
        cached = _read_cache(cache_path)
        if cached is not None:
            return _ablated(cached)
    ruleset = _load_uncached(root, paths)
    if cache_path is not None:
        _write_cache(cache_path, ruleset)
    return _ablated(ruleset)


def _ablated(ruleset: RuleSet) -> RuleSet:
    """The rule set without its emitter-catalog rules under LOGDX_ABLATE=catalogs (the cache
    always holds every rule; the version says which set diagnosed)."""
    from app.core.ablation import enabled

    if enabled("catalogs") or not any(r.spec.catalog for r in ruleset.diagnosis):
        return ruleset
    return RuleSet(diagnosis=[r for r in ruleset.diagnosis if not r.spec.catalog], filters=ruleset.filters,
                   policies=ruleset.policies, version=f"{ruleset.version}-nocatalogs", files=ruleset.files)


def _load_uncached(root: Path, paths: list[Path]) -> RuleSet:
    from app.core.keptshapes import digit_form
    from app.core.matcher import re2_form

    ruleset = RuleSet()
    version = hashlib.sha256()
    seen: dict[str, str] = {}
    for path in paths:
        rf = _load_file(path)
        if rf is None:
            continue
        version.update(path.name.encode() + b"\0" + path.read_bytes())
        # an overlay's file is named by its full path: it may share a name with a shipped one
        rel = str(path.relative_to(root)) if path.is_relative_to(root) else \
            str(path) if path.is_absolute() else path.name
        ruleset.files.append(rel)
        if rf.catalog and rf.kind != "diagnosis" or rf.source and rf.kind not in ("diagnosis", "exceptions", "subsystems"):
            raise RuleError(f"{rel}: catalog/source are for diagnosis rule files, not {rf.kind}")
        for spec in rf.rules:
            where = f"{rel}: rule {spec.id}"
            if isinstance(spec, DiagnosisRuleSpec):
                if rf.catalog and not spec.catalog:
                    spec = replace(spec, catalog=True)
                if spec.catalog and not (spec.source or rf.source):
                    raise RuleError(f"{where}: a catalog rule names its source (the rule's or the file's `source:`)")
            if spec.id in seen:
                other, hint = seen[spec.id], ""
                if Path(rel).is_absolute():  # an overlay's rule
                    other = other if Path(other).is_absolute() else str(root / other)
                    hint = ("; an overlay adds rules, it cannot replace one: to change a shipped rule, "
                            "`logdx rules export DIR`, edit the copy and point LOGDX_RULES_DIR at it")
                raise RuleError(f"{where}: duplicate id (also in {other}){hint}")
            seen[spec.id] = rel
            if isinstance(spec, PolicySpec):
                ruleset.policies.append(spec)
                continue
            if isinstance(spec, ExceptionEntrySpec):
                ruleset.exceptions.append(spec)
                continue
            if isinstance(spec, SubsystemSpec):
                if (spec.nouns is None) != (spec.failure is None) or (spec.nouns is None) == (spec.frames is None):
                    raise RuleError(f"{where}: a subsystem entry reads lines (`nouns` and `failure`) or a cut "
                                    "traceback's frames (`frames`), one of the two")
                ruleset.subsystems.append(spec)
                continue
            compiled, args = compile_pattern_args(spec.pattern, ignore_case=spec.ignore_case, where=where)
            _check_groups(compiled, where, spec.pattern)
            lazy = LazyPattern(compiled.pattern, compiled.flags, re2_form(compiled.pattern, compiled.flags), compiled,
                               args=args)
            if isinstance(spec, DiagnosisRuleSpec):
                lazy.digit_form = digit_form(compiled.pattern, compiled.flags)
                if spec.type_from_group and spec.type_from_group not in compiled.groupindex:
                    raise RuleError(f"{where}: type_from_group {spec.type_from_group!r} is not a group of {spec.pattern!r}")
                ruleset.diagnosis.append(DiagnosisRule(spec, rel, lazy))
            else:
                ruleset.filters.append(FilterRule(spec, rel, lazy))
    rule_ids = {r.id for r in ruleset.diagnosis}
    for policy in ruleset.policies:
        if policy.rule is not None and policy.rule not in rule_ids:
            raise RuleError(f"policy {policy.id}: `rule: {policy.rule}` names no diagnosis rule")
    ruleset.version = version.hexdigest()[:12]
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
    if ruleset.exceptions:  # an exception line must resolve to its entry (app/core/exceptions.py)
        from app.core.exceptions import check_table_examples, table_of

        failures += [ExampleFailure(rid, "exceptions", text, want)
                     for rid, text, want in check_table_examples(table_of(ruleset))]
    return failures

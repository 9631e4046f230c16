"""The schema of rule files (`rules/*.yaml`): what a diagnosis rule, a filter rule and a policy
may say. Loading, compiling and caching them is `app/core/rules.py`.

The specs are plain dataclasses: a warm rules cache unpickles them without importing pydantic. A
cold cache checks each rule file's data with `validate` (app/core/validation.py) first: unknown
keys, enums, id pattern, bounds, policy conditions and `preceded_by` patterns.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import StrEnum
from typing import Annotated, Literal

import regex

from app.core.types import ActionKind, Category, ErrorType, Role
from app.core.validation import After, Check, Strict


class FilterKind(StrEnum):
    METRIC = "metric"
    PROGRESS = "progress"
    INIT = "init"
    CHATTER = "chatter"
    WARNING = "warning"


RuleId = Annotated[str, Check(pattern=r"^[a-z0-9][a-z0-9_.-]*$")]


@dataclass(slots=True, kw_only=True)
class Examples(Strict):
    match: Annotated[list[str], Check(min_length=1)]
    no_match: list[str] = field(default_factory=list)


@dataclass(slots=True, kw_only=True)
class _RuleBase(Strict):
    id: RuleId
    pattern: str
    ignore_case: bool = False
    hint: str | None = None
    examples: Examples


@dataclass(slots=True, kw_only=True)
class DiagnosisRuleSpec(_RuleBase):
    error_type: ErrorType
    category: Category | None = None
    role: Role = Role.CAUSE
    priority: Annotated[int, Check(ge=0, le=100)] | None = None
    action: ActionKind | None = None
    # a named group whose captured exception class name, when canonical, becomes the type
    type_from_group: str | None = None
    # an emitter-catalog rule (derived from what a program can print, not from one thread): off
    # under LOGDX_ABLATE=catalogs; a file's own `catalog: true` marks every rule in it
    catalog: bool = False
    # where the rule's wording comes from (project, file, version or doc URL)
    source: Annotated[str, Check(min_length=1)] | None = None
    # a symptom that the communicators' teardown prints too (NCCL's proxy service thread losing
    # its local connections when the processes exit): when every event of a log is such a one,
    # the log shows no failure (rank.py)
    teardown_alone: bool = False
    # a client's giving-up message that reads the same whatever made it give up (transformers'
    # "We couldn't connect to 'https://huggingface.co' to load this file" in offline mode and
    # after a failed connection alike): an error of one of these types printed within
    # GIVE_UP_WINDOW lines of it (its retries, the traceback under it) is what it gave up on, the
    # cause; this message is then its wrapper (rank.py `mark_give_ups`). Alone, it stands.
    gives_up_after: list[ErrorType] = field(default_factory=list)
    # a reading of last resort (a native CHECK that failed: the message names the invariant, not
    # the subsystem it guards): when it is the root cause, the subsystem vocabulary is asked
    # first, as for an untyped failure, and this reading stands only when the vocabulary names
    # nothing (rank.py `by_vocabulary`)
    last_resort: bool = False
    # the message is a host's report about itself (a VM's own metadata service announcing its
    # preemption, its own power key): the node it concerns is the host that printed it, so a log
    # printed by one host names that host (pipeline.py), where a node loss is otherwise reported
    # by the survivors and never names the printer
    on_printer: bool = False


@dataclass(slots=True, kw_only=True)
class FilterRuleSpec(_RuleBase):
    filter: FilterKind
    # named groups (step, loss, ...) are extracted as a metric series when true
    extract: bool = False
    # the line marks training progress (last-progress marker for hang detection)
    progress: bool = False
    # the line says training finished normally (needs progress: true): a log without an error
    # after it is reported as no failure, not as a hang
    completion: bool = False
    # the trainer leaves a loss out of the line when its value is not positive (Megatron-LM's
    # training_log prints a loss key only `if avg > 0.0`, so a NaN loss vanishes): a line of this
    # rule without its `loss` group, after lines of it with one, and with a field printed after
    # the loss (loss scale, grad norm: the line was not cut), is a non-finite loss, unless its
    # `skipped` group counts skipped iterations (an fp16 overflow interval has no loss either)
    missing_loss_is_nan: bool = False


def _known_conditions(value: list[str]) -> list[str]:
    from app.core.policy import CONDITIONS

    unknown = [c for c in value if c not in CONDITIONS]
    if unknown:
        raise ValueError(f"unknown condition(s) {unknown}; known: {sorted(CONDITIONS)}")
    return value


def _compiles(value: str) -> str:
    try:
        regex.compile(value)
    except regex.error as exc:  # not a ValueError: said here so that it is a rule error, not a crash
        raise ValueError(f"does not compile ({exc}): {value!r}") from None
    return value


def _compiles_ci(value: str) -> str:
    try:
        regex.compile(value, regex.I)
    except regex.error as exc:
        raise ValueError(f"does not compile ({exc}): {value!r}") from None
    return value


ClassName = Annotated[str, Check(pattern=r"^(?:[A-Za-z_]\w*\.)*[A-Za-z_]\w*$")]


@dataclass(slots=True, kw_only=True)
class ExceptionEntrySpec(Strict):
    """One entry of the exception table (`kind: exceptions`, app/core/exceptions.py): exception
    classes (bare `KeyError` or qualified `torch.distributed.DistBackendError`), optionally only
    in these module families and with a message matching `message`, to a canonical type. An entry
    without `classes` types classes no entry names: by module family and `name_pattern` (a regex
    on the class's own name). `examples` are exception lines that must (not) resolve to it."""

    id: RuleId
    classes: list[ClassName] = field(default_factory=list)
    modules: list[Annotated[str, Check(pattern=r"^[A-Za-z_][\w.]*$")]] = field(default_factory=list)
    name_pattern: Annotated[str, After(_compiles)] | None = None
    message: Annotated[str, After(_compiles_ci)] | None = None
    error_type: ErrorType
    category: Category | None = None
    role: Role = Role.CAUSE
    priority: Annotated[int, Check(ge=0, le=100)] = 50
    action: ActionKind | None = None
    hint: str | None = None
    source: str  # where the class names come from (project, file or documentation page)
    examples: Examples
    # a guess from the class's own name alone (`ConfigKeyError` most likely subclasses KeyError):
    # ranked below every package family, so a known package's class keeps its family's type
    last_resort: bool = False


@dataclass(slots=True, kw_only=True)
class SubsystemSpec(Strict):
    """One subsystem of the vocabulary fallback (`kind: subsystems`, app/core/subsystems.py): an
    error-looking line no rule typed, at error severity, that names this subsystem (`nouns`) and a
    failure (`failure`) is typed `error_type`; the highest `priority` among a log's lines wins.
    `examples.match` lines must be typed by this entry, `no_match` lines must not."""

    id: RuleId
    error_type: ErrorType
    priority: Annotated[int, Check(ge=0, le=100)] = 50
    # (an entry reads lines by `nouns` and `failure`, or a cut traceback's frames by `frames`)
    nouns: Annotated[str, After(_compiles_ci)] | None = None
    failure: Annotated[str, After(_compiles_ci)] | None = None
    # the file path of a Python frame in the packages of this subsystem's clients: a traceback the
    # log ends in, cut before its exception line, with such a frame is typed by the entry
    # (`examples` are then frame lines, `File "<path>", line N, in <function>`)
    frames: Annotated[str, After(_compiles)] | None = None
    # the entry reads an errno / status string that names the object and the failure at once
    # (`Connection reset by peer`): on its own line it wins over the entries that pair a noun with
    # a failure word (a line tagged `device=TPU:6` whose failure is a reset connection)
    exact: bool = False
    hint: str | None = None
    examples: Examples


@dataclass(slots=True, kw_only=True)
class PolicySpec(Strict):
    id: RuleId
    error_type: ErrorType | None = None
    category: Category | None = None
    # the diagnosis rule the root cause must have been found by (one message whose reading
    # depends on when it came: CUDA's unknown error before or after the job trained)
    rule: RuleId | None = None
    when: Annotated[list[str], After(_known_conditions)] = field(default_factory=list)
    # a regex one of the lines up to the root cause must match (its own line included): the
    # job's own step that explains the error, e.g. rank 0 tokenizing before a collective timeout
    preceded_by: Annotated[str, After(_compiles)] | None = None
    action: ActionKind
    reason: str


@dataclass(slots=True, kw_only=True)
class RuleFile(Strict):
    kind: Literal["diagnosis", "filter", "policy", "exceptions", "subsystems"]
    family: str
    description: str | None = None
    # an emitter catalog (diagnosis files only): every rule is a catalog rule (see DiagnosisRuleSpec)
    catalog: bool = False
    # where a catalog's or the exception table's names come from: project, file and
    # version/commit, or documentation URL
    source: Annotated[list[Annotated[str, Check(min_length=1)]], Check(min_length=1)] | None = None
    rules: list[DiagnosisRuleSpec] | list[FilterRuleSpec] | list[PolicySpec] | list[ExceptionEntrySpec] \
        | list[SubsystemSpec] = \
        field(default_factory=list)

"""Domain vocabulary shared by every pipeline stage and the diagnosis JSON contract."""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import StrEnum
from typing import Annotated, Any

from app.core.validation import Check, Strict

SCHEMA_ID = "logdx.diagnosis/v1"


class Category(StrEnum):
    INFRASTRUCTURE = "infrastructure"
    FRAMEWORK = "framework"
    SCRIPT = "script"
    UNKNOWN = "unknown"


class ErrorType(StrEnum):
    # infrastructure
    NVLinkError = "NVLinkError"
    CUDAError = "CUDAError"
    ECCError = "ECCError"
    NodeFailure = "NodeFailure"
    NetworkError = "NetworkError"
    NCCLTimeoutError = "NCCLTimeoutError"
    NCCLRemoteError = "NCCLRemoteError"
    ConnectionError = "ConnectionError"
    S3StorageError = "S3StorageError"
    StorageError = "StorageError"
    # framework
    DataloaderKilled = "DataloaderKilled"
    OutOfMemoryError = "OutOfMemoryError"
    HostOOMKilled = "HostOOMKilled"
    AttributeError = "AttributeError"
    RuntimeError = "RuntimeError"
    AssertionError = "AssertionError"
    ValueError = "ValueError"
    ZeroDivisionError = "ZeroDivisionError"
    ModelLoadingError = "ModelLoadingError"
    DatasetLoadingError = "DatasetLoadingError"
    NaNLoss = "NaNLoss"
    LossSpike = "LossSpike"
    Hang = "Hang"
    # script
    FileNotFoundError = "FileNotFoundError"
    TypeError = "TypeError"
    OSError = "OSError"
    KeyError = "KeyError"
    ImportError = "ImportError"
    ModuleNotFoundError = "ModuleNotFoundError"
    IndexError = "IndexError"
    NameError = "NameError"
    SyntaxError = "SyntaxError"
    PermissionError = "PermissionError"
    ArgumentError = "ArgumentError"
    CalledProcessError = "CalledProcessError"
    # symptom-only classes: never a root cause when anything else is present
    ChildFailedError = "ChildFailedError"
    Unknown = "Unknown"


_INFRA = {
    "NVLinkError", "CUDAError", "ECCError", "NodeFailure", "NetworkError", "NCCLTimeoutError",
    "NCCLRemoteError", "ConnectionError", "S3StorageError", "StorageError",
}
_FRAMEWORK = {
    "DataloaderKilled", "OutOfMemoryError", "HostOOMKilled", "AttributeError", "RuntimeError",
    "AssertionError", "ValueError", "ZeroDivisionError", "ModelLoadingError",
    "DatasetLoadingError", "NaNLoss", "LossSpike", "Hang", "ChildFailedError",
}


def default_category(error_type: ErrorType) -> Category:
    """The category DESIGN.md assigns to a type; rules and context may override it."""
    if error_type.value in _INFRA:
        return Category.INFRASTRUCTURE
    if error_type.value in _FRAMEWORK:
        return Category.FRAMEWORK
    if error_type is ErrorType.Unknown:
        return Category.UNKNOWN
    return Category.SCRIPT


# Root-cause families: types that one recovery path and one owner share. Accuracy is reported
# per type and per family (a CUDAError read as an ECCError is the right family, wrong type).
FAMILIES: dict[str, frozenset[str]] = {
    "gpu": frozenset({"NVLinkError", "CUDAError", "ECCError"}),
    "node": frozenset({"NodeFailure"}),
    "network": frozenset({"NetworkError", "NCCLTimeoutError", "NCCLRemoteError", "ConnectionError"}),
    "storage": frozenset({"S3StorageError", "StorageError"}),
    "memory": frozenset({"OutOfMemoryError", "HostOOMKilled", "DataloaderKilled"}),
    "loss": frozenset({"NaNLoss", "LossSpike"}),
    "hang": frozenset({"Hang"}),
    "model_data": frozenset({"ModelLoadingError", "DatasetLoadingError"}),
    "environment": frozenset({"ImportError", "ModuleNotFoundError", "CalledProcessError"}),
    "config": frozenset({"ArgumentError", "FileNotFoundError", "PermissionError", "OSError"}),
    "code": frozenset({"AttributeError", "RuntimeError", "AssertionError", "ValueError",
                       "ZeroDivisionError", "TypeError", "KeyError", "IndexError", "NameError",
                       "SyntaxError"}),
    "unknown": frozenset({"Unknown", "ChildFailedError"}),
}


def family_of(error_type: str) -> str:
    """The root-cause family of a canonical type name (`unknown` for anything else)."""
    for name, members in FAMILIES.items():
        if error_type in members:
            return name
    return "unknown"


class ActionKind(StrEnum):
    ISOLATE_AND_RESTART = "isolate_and_restart"
    RETRY = "retry"
    NO_RETRY = "no_retry"
    ROLLBACK_AND_SKIP = "rollback_and_skip"
    INVESTIGATE = "investigate"


class Role(StrEnum):
    """How an event relates to the failure: a cause, a wrapper that re-raises one, or a symptom."""

    CAUSE = "cause"
    WRAPPER = "wrapper"
    SYMPTOM = "symptom"


class DecidedBy(StrEnum):
    RULES = "rules"
    RETRIEVAL = "retrieval"
    LLM = "llm"


# The contract is stdlib dataclasses (no pydantic on the CLI's path); untrusted data (stored,
# uploaded or LLM-written diagnoses) goes through `Diagnosis.from_json_dict`, which checks it as
# strictly as a pydantic model would (app/core/validation.py).
Confidence = Annotated[float, Check(ge=0.0, le=1.0)]


def _enum(kind: type[StrEnum], value: Any) -> Any:
    return value if type(value) is kind else kind(value)


@dataclass(slots=True, kw_only=True)
class Evidence(Strict):
    line: int
    text: str
    rank: int | None = None
    host: str | None = None


@dataclass(slots=True, kw_only=True)
class RootCause(Strict):
    error_type: ErrorType
    category: Category
    confidence: Confidence
    evidence: list[Evidence]
    explanation: str
    rule_id: str | None = None
    gpu: str | None = None
    xid: int | None = None
    # a loss spike / non-finite loss: the first step seen bad and the last step seen healthy
    # before it (the onset lies after last_good_step, at or before onset_step)
    onset_step: int | None = None
    last_good_step: int | None = None

    def __post_init__(self) -> None:
        # code builds these from strings too; the JSON form and `.value` need the enums
        self.error_type = _enum(ErrorType, self.error_type)
        self.category = _enum(Category, self.category)
        self.confidence = float(self.confidence)
        if not 0.0 <= self.confidence <= 1.0:
            raise ValueError(f"confidence must be in [0, 1], got {self.confidence}")


@dataclass(slots=True, kw_only=True)
class CoOccurring(Strict):
    error_type: ErrorType
    role: str  # "symptom" | "wrapper" | "independent" | "recovered"
    count: int
    first_line: int
    rule_id: str | None = None
    ranks: list[int] = field(default_factory=list)
    hosts: list[str] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.error_type = _enum(ErrorType, self.error_type)


@dataclass(slots=True, kw_only=True)
class Action(Strict):
    kind: ActionKind
    suspect_hosts: list[str] = field(default_factory=list)
    suspect_ranks: list[int] = field(default_factory=list)
    reason: str

    def __post_init__(self) -> None:
        self.kind = _enum(ActionKind, self.kind)


@dataclass(slots=True, kw_only=True)
class CompressionStats(Strict):
    bytes_in: int
    bytes_out: int
    lines_in: int
    lines_kept: int
    lines_dropped: int = 0
    templates: int = 0
    lines_cut: int = 0
    encoding: str = "plain"
    ratio: float = 0.0
    dropped_by_rule: dict[str, int] = field(default_factory=dict)
    warnings: list[str] = field(default_factory=list)


@dataclass(slots=True, kw_only=True)
class Progress(Strict):
    step: int | None = None
    line: int
    time: str | None = None
    text: str | None = None


@dataclass(slots=True, kw_only=True)
class Versions(Strict):
    rules: str
    prompt: str | None = None
    model: str | None = None
    logdx: str


@dataclass(slots=True, kw_only=True)
class Diagnosis(Strict):
    """The diagnosis contract of DESIGN.md (`schema: logdx.diagnosis/v1`)."""

    schema: str = SCHEMA_ID
    root_cause: RootCause
    co_occurring: list[CoOccurring]
    action: Action
    decided_by: DecidedBy
    compression: CompressionStats
    last_progress: Progress | None
    versions: Versions
    notes: list[str] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.decided_by = _enum(DecidedBy, self.decided_by)

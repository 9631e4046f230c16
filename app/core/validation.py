"""Plain dataclasses, validated strictly where their data comes from outside.

The diagnosis contract (`app/core/types.py`) and the rule specs (`app/core/rules.py`) are stdlib
dataclasses: building one in code costs what a dataclass costs, and `logdx diagnose` on a warm
rules cache never imports pydantic (its import and the building of its validators were a third
of the CLI's start-up). Data from outside (rule files, stored, uploaded or LLM-written
diagnoses) goes through `validate`, which builds a pydantic `TypeAdapter` for the class on first
use: unknown keys are refused (`__pydantic_config__`), enums and field types are checked, and
`Check(...)` in an `Annotated` type adds bounds (`ge`, `le`, `pattern`, `min_length`) and
`After(func)` a check of its own. pydantic reads both through its `__get_pydantic_core_schema__`
hook, so the bounds also reach the OpenAPI schema; `annotated_types` would say the same but costs
~9 ms of import on every start.
"""

from __future__ import annotations

from enum import Enum
from typing import Any, TypeVar

T = TypeVar("T")


class Check:
    """Bounds for the type it annotates: `Annotated[float, Check(ge=0.0, le=1.0)]`. The keys are
    those of pydantic-core's schema for that type (`ge`/`le` for numbers, `pattern` for strings,
    `min_length` for lists)."""

    __slots__ = ("constraints",)

    def __init__(self, **constraints: Any) -> None:
        self.constraints = constraints

    def __get_pydantic_core_schema__(self, source: Any, handler: Any) -> Any:
        schema = handler(source)
        schema.update(self.constraints)
        return schema

    def __repr__(self) -> str:
        return f"Check({', '.join(f'{k}={v!r}' for k, v in self.constraints.items())})"


class After:
    """A check run after the type's own: `Annotated[list[str], After(func)]`, where `func` returns
    the value or raises ValueError (reported at the field, like a pydantic field validator)."""

    __slots__ = ("func",)

    def __init__(self, func: Any) -> None:
        self.func = func

    def __get_pydantic_core_schema__(self, source: Any, handler: Any) -> Any:
        from pydantic_core import core_schema

        return core_schema.no_info_after_validator_function(self.func, handler(source))


class Strict:
    """Base of the validated dataclasses: unknown keys are an error, `to_json_dict` is the JSON
    form (enums as their values, field order as declared) and `from_json_dict` its checked
    inverse."""

    __slots__ = ()
    __pydantic_config__ = {"extra": "forbid"}  # a plain dict: pydantic reads it, nobody imports it

    def to_json_dict(self) -> dict[str, Any]:
        return {name: _json(getattr(self, name)) for name in self.__dataclass_fields__}

    @classmethod
    def from_json_dict(cls: type[T], data: Any) -> T:
        """`data` checked against the class (raises pydantic's `ValidationError`, a ValueError)."""
        return validate(cls, data)


def _json(value: Any) -> Any:
    if isinstance(value, Strict):
        return value.to_json_dict()
    if isinstance(value, Enum):
        return value.value
    if isinstance(value, list):
        return [_json(v) for v in value]
    if isinstance(value, dict):
        return {k: _json(v) for k, v in value.items()}
    return value


def error_message(error: dict[str, Any]) -> str:
    """The message of one entry of `ValidationError.errors()`; a key the class does not have is
    said as pydantic says it for a model (a dataclass's would read "Unexpected keyword argument")."""
    if error["type"] == "unexpected_keyword_argument":
        return "Extra inputs are not permitted"
    return error["msg"]


_ADAPTERS: dict[type, Any] = {}


def validate(cls: type[T], data: Any) -> T:
    """An instance of the dataclass `cls` from `data` (a dict, or an instance), checked."""
    adapter = _ADAPTERS.get(cls)
    if adapter is None:
        from pydantic import TypeAdapter  # only validation needs pydantic

        adapter = _ADAPTERS[cls] = TypeAdapter(cls)
    return adapter.validate_python(data)

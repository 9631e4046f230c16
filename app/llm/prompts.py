"""Versioned prompt files: `prompts/<task>/<version>.yaml`.

A file declares its variables; at load every `${name}` used in the templates must be declared and
every declared variable used, and `render` refuses missing or unknown values. The prompt's
`ref` ("root_cause/v1#1a2b3c4d5e6f": task, version and content hash) is stored with each diagnosis.
"""

from __future__ import annotations

import hashlib
import string
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from app import resources
from app.llm.errors import PromptError

DEFAULT_PROMPTS_DIR = resources.data_dir("prompts")


class _PromptFile(BaseModel):
    model_config = ConfigDict(extra="forbid")
    task: str
    version: str = Field(pattern=r"^v\d+$")
    mode: Literal["json", "choice"]
    description: str
    variables: list[str]
    system: str | None = None
    user: str
    output_schema: dict[str, Any] | None = None
    # choice mode: the instruction after which the choice label is scored
    answer_prefix: str | None = None


@dataclass(frozen=True)
class PromptTemplate:
    task: str
    version: str
    mode: str
    variables: tuple[str, ...]
    system: str | None
    user: str
    output_schema: dict[str, Any] | None
    answer_prefix: str | None
    sha256: str
    source: str = field(default="", compare=False)

    @property
    def ref(self) -> str:
        return f"{self.task}/{self.version}#{self.sha256[:12]}"

    def render(self, **values: Any) -> tuple[str | None, str]:
        """(system, user) with every declared variable substituted."""
        missing = set(self.variables) - set(values)
        unknown = set(values) - set(self.variables)
        if missing or unknown:
            raise PromptError(f"{self.source}: render got missing={sorted(missing)} unknown={sorted(unknown)}")
        vals = {k: str(v) for k, v in values.items()}
        system = string.Template(self.system).substitute(vals) if self.system else None
        return system, string.Template(self.user).substitute(vals)


def _identifiers(template: str, where: str) -> set[str]:
    t = string.Template(template)
    if not t.is_valid():
        raise PromptError(f"{where}: invalid placeholder syntax (use ${{name}}; write $$ for a literal $)")
    return set(t.get_identifiers())


def load_prompt(task: str, version: str | None = None, *, prompts_dir: Path | str | None = None) -> PromptTemplate:
    """Load `prompts/<task>/<version>.yaml`; without a version, the highest `vN`."""
    root = Path(prompts_dir) if prompts_dir else DEFAULT_PROMPTS_DIR
    task_dir = root / task
    if version is None:
        versions = sorted(task_dir.glob("v*.yaml"), key=lambda p: int(p.stem[1:]) if p.stem[1:].isdigit() else -1)
        if not versions:
            raise PromptError(f"no prompt versions under {task_dir}")
        path = versions[-1]
    else:
        path = task_dir / f"{version}.yaml"
    if not path.is_file():
        raise PromptError(f"prompt file not found: {path}")
    return load_prompt_file(path)


def load_prompt_file(path: Path) -> PromptTemplate:
    where = f"{path.parent.name}/{path.name}"
    raw_bytes = path.read_bytes()
    try:
        raw = yaml.safe_load(raw_bytes)
        spec = _PromptFile.model_validate(raw)
    except yaml.YAMLError as exc:
        raise PromptError(f"{where}: not valid YAML: {exc}") from None
    except ValidationError as exc:
        errs = "; ".join(f"{'.'.join(map(str, e['loc']))}: {e['msg']}" for e in exc.errors())
        raise PromptError(f"{where}: {errs}") from None
    if spec.task != path.parent.name or spec.version != path.stem:
        raise PromptError(f"{where}: task/version {spec.task}/{spec.version} do not match the file location")
    used = _identifiers(spec.user, where) | (_identifiers(spec.system, where) if spec.system else set())
    declared = set(spec.variables)
    if used - declared:
        raise PromptError(f"{where}: undeclared variable(s) {sorted(used - declared)}")
    if declared - used:
        raise PromptError(f"{where}: declared but unused variable(s) {sorted(declared - used)}")
    if spec.mode == "json" and not spec.output_schema:
        raise PromptError(f"{where}: mode json needs output_schema")
    return PromptTemplate(spec.task, spec.version, spec.mode, tuple(spec.variables), spec.system, spec.user,
                          spec.output_schema, spec.answer_prefix, hashlib.sha256(raw_bytes).hexdigest(), where)


def load_all_prompts(prompts_dir: Path | str | None = None) -> list[PromptTemplate]:
    """Every prompt file, for start-up checks (a broken prompt refuses to start)."""
    root = Path(prompts_dir) if prompts_dir else DEFAULT_PROMPTS_DIR
    return [load_prompt_file(p) for p in sorted(root.glob("*/v*.yaml"))]

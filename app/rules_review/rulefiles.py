"""Writing an approved rule into the rule library (`<rules_dir>/<family>.yaml`).

The whole resulting library is loaded and compiled from a temporary copy first (and the new
rule's examples run), so a rule that would stop the service from starting is refused and nothing
is written. The file is then replaced atomically (write a sibling, fsync, rename). Existing files
keep their comments: the rule is appended as text when the file ends with its `rules:` list, and
the result is checked to parse to exactly the old rules plus the new one (else the file is
re-rendered). The new rule set's version hash is the version of the change.
"""

from __future__ import annotations

import fcntl
import os
import re
import shutil
import tempfile
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import yaml

from app.core.rules import RuleError, RuleSet, check_examples, load_rules
from app.errors import Conflict, InvalidInput

FAMILY = re.compile(r"^[a-z0-9][a-z0-9_-]{0,63}$")
_THREAD_LOCK = threading.Lock()


@contextmanager
def rules_write_lock(lock_path: Path) -> Iterator[None]:
    """Serialises rule-library writers: threads of this process, and processes sharing the file."""
    lock_path.parent.mkdir(parents=True, exist_ok=True)
    with _THREAD_LOCK, open(lock_path, "a+") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)


def _dump(obj: Any) -> str:
    return yaml.safe_dump(obj, sort_keys=False, allow_unicode=True, width=10_000, default_flow_style=False)


def _new_file(kind: str, family: str, rule: dict[str, Any]) -> str:
    header = _dump({"kind": kind, "family": family,
                    "description": "Rules approved from proposals (POST /v1/rules/proposed/{id}/approve)."})
    return header + "rules:\n" + _indent(_dump([rule]), "  ")


def _indent(text: str, prefix: str) -> str:
    return "".join(prefix + line if line.strip() else line for line in text.splitlines(keepends=True))


def _item_indent(text: str) -> str | None:
    """Indentation of the items of a trailing top-level `rules:` block sequence, or None."""
    lines = text.splitlines()
    top = [i for i, ln in enumerate(lines) if ln and not ln[0].isspace() and not ln.startswith(("#", "-"))]
    if not top or not re.match(r"^rules:\s*(#.*)?$", lines[top[-1]]):
        return None
    for ln in lines[top[-1] + 1:]:
        m = re.match(r"^(\s*)- ", ln)
        if m:
            return m.group(1)
    return "  "


def render_with_rule(existing: str | None, *, kind: str, family: str, rule: dict[str, Any]) -> str:
    """The new text of `<family>.yaml` with `rule` appended."""
    if existing is None:
        return _new_file(kind, family, rule)
    try:
        doc = yaml.safe_load(existing)
    except yaml.YAMLError as exc:
        raise InvalidInput(f"{family}.yaml is not valid YAML: {exc}", code="invalid_rule") from None
    if not isinstance(doc, dict):
        raise InvalidInput(f"{family}.yaml is not a rule file", code="invalid_rule")
    if doc.get("kind") != kind:
        raise InvalidInput(f"{family}.yaml holds {doc.get('kind')} rules; a {kind} rule cannot go there",
                           code="invalid_rule", detail={"family": family, "file_kind": doc.get("kind")})
    old_rules = list(doc.get("rules") or [])
    indent = _item_indent(existing)
    if indent is not None:
        text = existing if existing.endswith("\n") else existing + "\n"
        text += _indent(_dump([rule]), indent)
        try:
            check = yaml.safe_load(text)
        except yaml.YAMLError:
            check = None
        if isinstance(check, dict) and check.get("rules") == [*old_rules, rule] and \
                {k: v for k, v in check.items() if k != "rules"} == {k: v for k, v in doc.items() if k != "rules"}:
            return text
    return _dump({**{k: v for k, v in doc.items() if k != "rules"}, "rules": [*old_rules, rule]})


def _atomic_write(path: Path, text: str) -> None:
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.write(text)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    dir_fd = os.open(path.parent, os.O_RDONLY)
    try:
        os.fsync(dir_fd)
    finally:
        os.close(dir_fd)


def append_rule(*, rules_dir: Path, kind: str, family: str, rule: dict[str, Any]) -> tuple[RuleSet, bool]:
    """Append `rule` to `<rules_dir>/<family>.yaml`, validated first. Returns (the new rule set,
    whether anything was written: False when the same rule is already there). Callers hold
    `rules_write_lock`."""
    if not FAMILY.match(family or ""):
        raise InvalidInput(f"rule family {family!r} is not a valid file name", code="invalid_rule",
                           detail={"family": family})
    if not rules_dir.is_dir():
        raise Conflict(f"rules directory {rules_dir} does not exist", code="rules_dir_missing")
    target = rules_dir / f"{family}.yaml"
    existing = target.read_text(encoding="utf-8") if target.exists() else None
    if existing is not None:
        try:
            present = [r for r in (yaml.safe_load(existing) or {}).get("rules") or [] if isinstance(r, dict)]
        except (yaml.YAMLError, AttributeError):
            present = []
        same = next((r for r in present if r.get("id") == rule.get("id")), None)
        if same is not None and same.get("pattern") == rule.get("pattern"):
            return load_rules(rules_dir), False  # approved before (a retry after a failed commit)
    text = render_with_rule(existing, kind=kind, family=family, rule=rule)
    with tempfile.TemporaryDirectory(prefix="logdx-rules-") as tmp:
        trial = Path(tmp) / "rules"
        shutil.copytree(rules_dir, trial, ignore=shutil.ignore_patterns(".*"))
        (trial / target.name).write_text(text, encoding="utf-8")
        try:
            ruleset = load_rules(trial)
        except RuleError as exc:
            raise InvalidInput(f"the rule library would not load with this rule: {exc}", code="invalid_rule",
                               detail={"family": family, "rule_id": rule.get("id")}) from None
        failures = [f for f in check_examples(ruleset) if f.rule_id == rule.get("id")]
        if failures:
            f = failures[0]
            raise InvalidInput(f"the rule's example {'does not match' if f.expected_match else 'matches'}: "
                               f"{f.example[:200]!r}", code="invalid_rule",
                               detail={"family": family, "rule_id": f.rule_id})
    _atomic_write(target, text)
    return ruleset, True

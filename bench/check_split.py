"""Check a collected split of labelled real logs before it is scored or moved into the corpus.

Usage: python bench/check_split.py DIR [DIR ...]

Each case is a folder with `log.txt` and `meta.json` (tests/golden/README.md). Reports, per case:
a meta.json that does not parse or lacks a field, a label outside the canonical enums, a
co-occurring entry without `error_type`/role, an `evidence` that is not verbatim in the log, a
negative control not labelled Unknown/investigate, a source already in the corpus, in
../shared/realworld-dev or in another case of the split, and a thread the repository already
cites (`git grep`, sealed split excluded). Then the split's mix against what a sealed split
needs (≥ 40 % infrastructure, ≥ 15 % negative controls, ≥ 30 % with co-occurring errors).
Exit status 1 when any case has a problem.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from app.core.types import ActionKind, Category, ErrorType  # noqa: E402

ROLES = {"symptom", "wrapper", "independent", "recovered"}
FIELDS = ("source", "source_kind", "repo", "root_cause", "category", "action", "suspect_hosts",
          "suspect_ranks", "co_occurring", "negative_control", "evidence", "label_evidence", "confidence", "why")
THREAD = re.compile(r"github\.com/([^/\s]+/[^/\s]+)/(issues|pull|discussions)/(\d+)")


def _sources(root: Path) -> set[str]:
    out = set()
    for meta in root.glob("*/meta.json"):
        try:
            out.add(json.loads(meta.read_text())["source"].rstrip("/"))
        except (ValueError, KeyError):
            continue
    return out


def _dev_sources() -> set[str]:
    index = next((d / "shared" / "realworld-dev" / "index.jsonl" for d in ROOT.parents
                  if (d / "shared" / "realworld-dev" / "index.jsonl").exists()), None)
    if index is None:
        return set()
    return {json.loads(line)["source"].rstrip("/") for line in index.read_text().splitlines() if line.strip()}


def _cited(source: str) -> str | None:
    m = THREAD.search(source)
    if m is None:
        return None
    out = subprocess.run(["git", "-C", str(ROOT), "grep", "-l", "-i", "-E", f"{m.group(1)}/{m.group(2)}/{m.group(3)}([^0-9]|$)",
                          "--", ".", ":!tests/golden/sealed"], capture_output=True, text=True)
    return out.stdout.splitlines()[0] if out.stdout.strip() else None


def check_case(case: Path, known: set[str], seen: dict[str, str]) -> tuple[list[str], dict]:
    problems: list[str] = []
    try:
        meta = json.loads((case / "meta.json").read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        return [f"meta.json: {exc}"], {}
    log = (case / "log.txt").read_text(encoding="utf-8", errors="replace") if (case / "log.txt").exists() else None
    if log is None:
        problems.append("no log.txt")
    problems += [f"missing field {f}" for f in FIELDS if f not in meta]
    for field, enum in (("root_cause", ErrorType), ("category", Category), ("action", ActionKind)):
        try:
            enum(meta.get(field))
        except ValueError:
            problems.append(f"{field} {meta.get(field)!r} is not a canonical value")
    for co in meta.get("co_occurring") or []:
        if co.get("error_type") not in ErrorType.__members__ or co.get("role") not in ROLES:
            problems.append(f"co_occurring entry {co} needs a canonical error_type and a role in {sorted(ROLES)}")
    evidence = (meta.get("evidence") or "").strip()
    if evidence and log is not None and evidence not in log:
        problems.append("evidence is not a verbatim line of log.txt")
    if meta.get("negative_control") and (meta.get("root_cause"), meta.get("action")) != ("Unknown", "investigate"):
        problems.append("a negative control must be labelled Unknown / investigate")
    source = (meta.get("source") or "").rstrip("/")
    if not source.startswith("https://"):
        problems.append("source is not an https URL")
    elif source in known:
        problems.append("source already in the corpus or realworld-dev")
    elif source in seen:
        problems.append(f"same source as {seen[source]}")
    elif (where := _cited(source)) is not None:
        problems.append(f"thread already cited in {where}")
    seen.setdefault(source, case.name)
    return problems, meta


def main(argv: list[str]) -> int:
    if not argv:
        print(__doc__.strip().splitlines()[2], file=sys.stderr)
        return 2
    known = _sources(ROOT / "tests" / "golden" / "corpus") | _dev_sources()
    seen: dict[str, str] = {}
    metas, bad = [], 0
    for d in argv:
        for case in sorted(p for p in Path(d).iterdir() if p.is_dir()):
            problems, meta = check_case(case, known, seen)
            if problems:
                bad += 1
                print(f"{case.name}: " + "; ".join(problems))
            if meta:
                metas.append(meta)
    n = len(metas) or 1
    infra = sum(m.get("category") == "infrastructure" for m in metas)
    neg = sum(bool(m.get("negative_control")) for m in metas)
    co = sum(bool(m.get("co_occurring")) for m in metas)
    hosts = sum(bool(m.get("suspect_hosts")) for m in metas)
    print(f"{len(metas)} cases, {bad} with problems; infrastructure {infra} ({infra / n:.0%}, ≥ 40 % asked), "
          f"negative controls {neg} ({neg / n:.0%}, ≥ 15 %), co-occurring {co} ({co / n:.0%}, ≥ 30 %), "
          f"naming a host {hosts}")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

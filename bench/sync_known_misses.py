"""Bring tests/golden/corpus/known_misses.json in line with what logdx answers now.

Usage: python bench/sync_known_misses.py [--note TEXT] [--dry-run]

Diagnoses every corpus case in-process (rules only, as tests/test_corpus.py does). A case whose
type or action is wrong and is not listed gets an entry (`NOTE: reads T/A (rule R), labelled
T'/A'`; rewrite it with the reason once known); a listed case that is now right is dropped, as is
a `<case> (hosts)` entry whose hosts are now right. For an isolate whose type and action are
right but whose hosts are not, a `<case> (hosts)` entry is added. Run it after moving a scored
sealed split into the corpus, and after a change that fixes or breaks cases (test_corpus.py's
strict xfails say which).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from app.core.pipeline import Pipeline  # noqa: E402
from app.core.rules import load_rules  # noqa: E402

CORPUS = ROOT / "tests" / "golden" / "corpus"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--note", default="", help="prefix of the reason written for a new miss")
    ap.add_argument("--dry-run", action="store_true", help="print what would change, write nothing")
    args = ap.parse_args(argv)
    path = CORPUS / "known_misses.json"
    known: dict[str, str] = json.loads(path.read_text()) if path.exists() else {}
    pipeline = Pipeline(load_rules())
    added, dropped = [], []
    prefix = f"{args.note}: " if args.note else ""
    for case in sorted(p for p in CORPUS.iterdir() if p.is_dir()):
        meta = json.loads((case / "meta.json").read_text(encoding="utf-8"))
        d = pipeline.diagnose(case / "log.txt").diagnosis
        got, want = (d.root_cause.error_type.value, d.action.kind.value), (meta["root_cause"], meta["action"])
        hosts_key = f"{case.name} (hosts)"
        if got != want:
            if case.name not in known:
                known[case.name] = (f"{prefix}reads {got[0]}/{got[1]} (rule {d.root_cause.rule_id}), "
                                    f"labelled {want[0]}/{want[1]}")
                added.append(case.name)
            if known.pop(hosts_key, None) is not None:
                dropped.append(hosts_key)
            continue
        if known.pop(case.name, None) is not None:
            dropped.append(case.name)
        if meta.get("suspect_hosts") and meta["action"] == "isolate_and_restart":
            right = sorted(d.action.suspect_hosts) == sorted(meta["suspect_hosts"])
            if not right and hosts_key not in known:
                known[hosts_key] = f"{prefix}names hosts {list(d.action.suspect_hosts)}, labelled {meta['suspect_hosts']}"
                added.append(hosts_key)
            elif right and known.pop(hosts_key, None) is not None:
                dropped.append(hosts_key)
    for name in added:
        print(f"+ {name}: {known[name]}")
    for name in dropped:
        print(f"- {name}")
    if not args.dry_run:
        path.write_text(json.dumps(dict(sorted(known.items())), indent=1, ensure_ascii=False) + "\n")
    print(f"{len(added)} added, {len(dropped)} dropped ({len(known)} listed)")
    return 0


if __name__ == "__main__":
    sys.exit(main())

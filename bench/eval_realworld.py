"""Root-cause and action accuracy of `logdx diagnose --json` over the labelled real logs.

Usage: python bench/eval_realworld.py [CASES_DIR] [--verbose]
Defaults to ../shared/realworld-dev/cases relative to the repository root.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DEFAULT_CASES = ROOT.parent / "shared" / "realworld-dev" / "cases"


def diagnose(log: Path) -> dict:
    out = subprocess.run([sys.executable, "-m", "app.cli", "diagnose", str(log), "--json"],
                         cwd=ROOT, capture_output=True, text=True, check=True)
    return json.loads(out.stdout)


def main(argv: list[str]) -> int:
    verbose = "--verbose" in argv
    args = [a for a in argv if not a.startswith("--")]
    cases_dir = Path(args[0]) if args else DEFAULT_CASES
    rows, rc_ok, act_ok = [], 0, 0
    cases = sorted(p for p in cases_dir.iterdir() if (p / "label.json").exists())
    for case in cases:
        label = json.loads((case / "label.json").read_text())
        d = diagnose(case / "log.txt")
        got_rc, got_act = d["root_cause"]["error_type"], d["action"]["kind"]
        ok_rc, ok_act = got_rc == label["root_cause"], got_act == label["action"]
        rc_ok += ok_rc
        act_ok += ok_act
        rows.append((case.name, label["root_cause"], got_rc, ok_rc, label["action"], got_act, ok_act,
                     d["root_cause"]["confidence"]))
    print("| case | expected | got | ok | expected action | got action | ok | conf |")
    print("|---|---|---|---|---|---|---|---|")
    for r in rows:
        if verbose or not (r[3] and r[6]):
            print(f"| {r[0]} | {r[1]} | {r[2]} | {'✓' if r[3] else '✗'} | {r[4]} | {r[5]} | {'✓' if r[6] else '✗'} | {r[7]} |")
    n = len(cases)
    print(f"\nroot cause accuracy: {rc_ok}/{n} = {rc_ok / n:.0%}")
    print(f"action accuracy:     {act_ok}/{n} = {act_ok / n:.0%}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

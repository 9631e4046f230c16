"""Accuracy of `logdx diagnose --json` over labelled real logs.

Usage: python bench/eval_realworld.py [CASES_DIR ...] [--verbose] [--cases] [--json OUT] [-j N] [--ablate NAMES] [--only LIST]

A case is a folder with `log.txt` and a label file: `meta.json` (the corpus in
tests/golden/corpus) or `label.json` (../shared/realworld-dev). Labels: `root_cause` (canonical
type), `action`, optional `suspect_hosts`, and `negative_control: true` for a run that did not
fail (or failed for no infrastructure reason the log shows) where the expected answer is given
by its `root_cause`/`action` as for any other case.

Reports type, family, action and suspect-host accuracy (exact set, and top-1 / top-3: the first
one / three hosts logdx names hold a labelled host), per source (`source_kind` in meta.json, else
the folder's name) and per expected family, false alarms on negative controls, the confusion of the
misses, and the costly wrong actions: a wrong `isolate_and_restart` drains a healthy node, a wrong
`no_retry` stops a job that would have run again; a wrong `retry` only costs one more attempt.
`--only LIST` scores only the cases a file names (one folder name per line, `#` comments):
bench/ua-uh-mix-subset.txt, for one.
Scoring only cases of tests/golden/sealed prints no per-case rows (`--cases` prints them).
`--ablate exceptions,signals` runs logdx with those mechanisms switched off (LOGDX_ABLATE,
app/core/ablation.py); `-j N` scores N cases at a time.
Defaults to ../shared/realworld-dev/cases relative to the repository root.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections import Counter, defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from app.core.types import family_of  # noqa: E402

SEALED = ("tests", "golden", "sealed")  # (any checkout's: a worktree of an older commit scores main's)
# ../shared/realworld-dev beside the checkout (or beside a folder holding it, as a git worktree is)
DEFAULT_CASES = next((d / "shared" / "realworld-dev" / "cases" for d in ROOT.parents
                      if (d / "shared" / "realworld-dev" / "cases").is_dir()),
                     ROOT.parent / "shared" / "realworld-dev" / "cases")


def diagnose(log: Path, ablate: str = "") -> dict:
    env = dict(os.environ, LOGDX_ABLATE=ablate) if ablate else None
    out = subprocess.run([sys.executable, "-m", "app.cli", "diagnose", str(log), "--json"],
                         cwd=ROOT, capture_output=True, text=True, check=True, env=env)
    return json.loads(out.stdout)


def load_label(case: Path) -> dict | None:
    for name in ("meta.json", "label.json"):
        if (case / name).exists():
            return json.loads((case / name).read_text())
    return None


def score_case(case: Path, label: dict, ablate: str = "") -> dict:
    d = diagnose(case / "log.txt", ablate)
    got_type, got_act = d["root_cause"]["error_type"], d["action"]["kind"]
    want_hosts = set(label.get("suspect_hosts") or [])
    named = list(d["action"].get("suspect_hosts") or [])
    got_hosts = set(named)
    return {
        "case": case.name,
        "source": label.get("source_kind") or case.parent.name,
        "negative": bool(label.get("negative_control")),
        "want_type": label["root_cause"], "got_type": got_type,
        "want_action": label["action"], "got_action": got_act,
        "type_ok": got_type == label["root_cause"],
        "family_ok": family_of(got_type) == family_of(label["root_cause"]),
        "action_ok": got_act == label["action"],
        # only scored where the label names hosts: every labelled host named, none extra
        "host_ok": (got_hosts == want_hosts) if want_hosts else None,
        "host_top1": bool(set(named[:1]) & want_hosts) if want_hosts else None,
        "host_top3": bool(set(named[:3]) & want_hosts) if want_hosts else None,
        "want_family": family_of(label["root_cause"]),
        "confidence": d["root_cause"]["confidence"],
    }


def summarize(rows: list[dict]) -> dict:
    def pct(key: str, rs: list[dict]) -> tuple[int, int]:
        scored = [r for r in rs if r[key] is not None]
        return sum(bool(r[key]) for r in scored), len(scored)

    by_source: dict[str, list[dict]] = defaultdict(list)
    for r in rows:
        by_source[r["source"]].append(r)
    negatives = [r for r in rows if r["negative"]]
    # a run that did not fail is diagnosed as no failure: type Unknown, action investigate
    false_alarms = [r for r in negatives if (r["got_type"], r["got_action"]) != (r["want_type"], r["want_action"])]
    by_family: dict[str, list[dict]] = defaultdict(list)
    for r in rows:
        by_family["negative control" if r["negative"] else str(r["want_family"])].append(r)
    wrong = [r for r in rows if not r["action_ok"]]
    return {
        "n": len(rows),
        "type": pct("type_ok", rows), "family": pct("family_ok", rows),
        "action": pct("action_ok", rows), "suspect_host": pct("host_ok", rows),
        "host_top1": pct("host_top1", rows), "host_top3": pct("host_top3", rows),
        "per_source": {s: {k: pct(k, rs) for k in ("type_ok", "family_ok", "action_ok")}
                       for s, rs in sorted(by_source.items())},
        "per_family": {f: {k: pct(k, rs) for k in ("type_ok", "family_ok", "action_ok")}
                       for f, rs in sorted(by_family.items())},
        # the wrong actions that do harm: a healthy node drained, a job stopped that would run again
        "wrong_isolate": sum(r["got_action"] == "isolate_and_restart" for r in wrong),
        "wrong_no_retry": sum(r["got_action"] == "no_retry" for r in wrong),
        "wrong_retry": sum(r["got_action"] == "retry" for r in wrong),
        "negative_controls": len(negatives), "false_alarms": len(false_alarms),
        "type_confusion": Counter(f"{r['want_type']} -> {r['got_type']}"
                                  for r in rows if not r["type_ok"]).most_common(),
        "action_confusion": Counter(f"{r['want_action']} -> {r['got_action']}"
                                    for r in rows if not r["action_ok"]).most_common(),
    }


def fmt(pair: tuple[int, int]) -> str:
    ok, n = pair
    return f"{ok}/{n} = {ok / n:.1%}" if n else "n/a"


def _option(argv: list[str], name: str) -> tuple[str | None, list[str]]:
    if name not in argv:
        return None, argv
    i = argv.index(name)
    if i + 1 >= len(argv):
        raise SystemExit(f"eval_realworld: {name} needs a value")
    return argv[i + 1], argv[:i] + argv[i + 2:]


def main(argv: list[str]) -> int:
    verbose = "--verbose" in argv
    out_json, argv = _option(argv, "--json")
    ablate, argv = _option(argv, "--ablate")
    jobs, argv = _option(argv, "-j")
    only_file, argv = _option(argv, "--only")
    only = None if only_file is None else {
        ln.strip() for ln in Path(only_file).read_text().splitlines() if ln.strip() and not ln.startswith("#")}
    dirs = [Path(a) for a in argv if not a.startswith("-")] or [DEFAULT_CASES]
    cases = []
    for cases_dir in dirs:
        for case in sorted(p for p in cases_dir.iterdir() if p.is_dir()):
            if only is not None and case.name not in only:
                continue
            label = load_label(case)
            if label is not None and (case / "log.txt").exists():
                cases.append((case, label))
    from concurrent.futures import ThreadPoolExecutor
    with ThreadPoolExecutor(max_workers=max(1, int(jobs or 1))) as pool:
        rows = list(pool.map(lambda c: score_case(c[0], c[1], ablate or ""), cases))
    if ablate:
        print(f"(mechanisms switched off: {ablate})\n")
    # a sealed split is scored on aggregates only: its misses, one by one, are what a fix must not
    # be read from (`--cases` shows them anyway, e.g. once the split has moved into the corpus)
    sealed = bool(cases) and all(c.resolve().parent.parts[-3:] == SEALED for c, _ in cases)
    show = verbose or "--cases" in argv or not sealed
    if not show:
        print("(per-case rows withheld: a sealed split is read on its aggregates; --cases shows them)")
    else:
        print("| case | expected | got | type | family | expected action | got action | ok | conf |")
        print("|---|---|---|---|---|---|---|---|---|")
    mark = lambda b: "✓" if b else "✗"  # noqa: E731
    for r in rows:
        if show and (verbose or not (r["type_ok"] and r["action_ok"])):
            print(f"| {r['case']} | {r['want_type']} | {r['got_type']} | {mark(r['type_ok'])} | "
                  f"{mark(r['family_ok'])} | {r['want_action']} | {r['got_action']} | "
                  f"{mark(r['action_ok'])} | {r['confidence']} |")
    s = summarize(rows)
    print(f"\ncases: {s['n']}")
    print(f"root cause type:    {fmt(s['type'])}")
    print(f"root cause family:  {fmt(s['family'])}")
    print(f"action:             {fmt(s['action'])}")
    print(f"suspect hosts:      {fmt(s['suspect_host'])} exact, top-1 {fmt(s['host_top1'])}, "
          f"top-3 {fmt(s['host_top3'])} (cases whose label names hosts)")
    print(f"negative controls:  {s['negative_controls']}, false alarms: {s['false_alarms']}")
    print(f"wrong actions by harm: isolate {s['wrong_isolate']} (a healthy node drained), "
          f"no_retry {s['wrong_no_retry']} (a job stopped), retry {s['wrong_retry']}")
    if len(s["per_source"]) > 1:
        print("\n| source | type | family | action |\n|---|---|---|---|")
        for src, p in s["per_source"].items():
            print(f"| {src} | {fmt(p['type_ok'])} | {fmt(p['family_ok'])} | {fmt(p['action_ok'])} |")
    print("\n| expected family | n | type | family | action |\n|---|---|---|---|---|")
    for fam, p in s["per_family"].items():
        print(f"| {fam} | {p['action_ok'][1]} | {fmt(p['type_ok'])} | {fmt(p['family_ok'])} | {fmt(p['action_ok'])} |")
    if s["type_confusion"]:
        print("\nmissed types (expected -> got):")
        for k, c in s["type_confusion"]:
            print(f"  {c:3d}  {k}")
    if s["action_confusion"]:
        print("missed actions (expected -> got):")
        for k, c in s["action_confusion"]:
            print(f"  {c:3d}  {k}")
    if out_json:
        Path(out_json).write_text(json.dumps({"summary": s, "cases": rows}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

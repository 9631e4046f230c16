#!/usr/bin/env python3
"""CLI start-up: how long `logdx diagnose` / `logdx compress` take on a one-line log, where
start-up is everything (a Slurm epilog runs logdx once per job).

Each run is a fresh process that calls the console-script entry point (`app.cli:main`, what
the installed `logdx` runs), or `python -m app.cli` with --module. The rules cache is warmed by one
uncounted run first (a temporary $LOGDX_RULES_CACHE_DIR); one cold-cache run is reported apart.
Prints median and min wall time and CPU (user+sys of the child), and the load average before
and after, because on a shared machine the wall figure is only as good as the load allows.

    python bench/bench_startup.py                 # 10 runs of each command
    python bench/bench_startup.py -n 20 --module
    python bench/bench_startup.py --json out.json
    python bench/bench_startup.py --phases        # where the time goes, in-process, per stage
"""

from __future__ import annotations

import argparse
import compileall
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
COMMANDS = {"diagnose --json": ["diagnose", "{log}", "--json"], "diagnose": ["diagnose", "{log}"],
            "compress": ["compress", "{log}"],
            # a real one-line log has digits (a timestamp at least): its kept line is checked against
            # the rules relaxed to any digits, which a line without digits skips
            "diagnose --json, a line with digits": ["diagnose", "{digits}", "--json"]}
DIGITS_LINE = "2026-11-30 08:00:01,123 INFO worker 3 started on node-12 (pid 4242)\n"
ENTRY = "import sys; from app.cli import main; sys.argv = ['logdx', *sys.argv[1:]]; main()"


def run_once(argv: list[str], env: dict[str, str]) -> tuple[float, float]:
    """(wall seconds, CPU seconds of the child) of one run."""
    t0 = time.perf_counter()
    proc = subprocess.Popen(argv, env=env, cwd=REPO, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    _, status, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - t0
    proc.returncode = os.waitstatus_to_exitcode(status)
    err = proc.stderr.read().decode(errors="replace")
    proc.stderr.close()
    if proc.returncode != 0:
        raise SystemExit(f"{' '.join(argv)} failed ({proc.returncode}): {err.strip()}")
    return wall, usage.ru_utime + usage.ru_stime


# one fresh process: the time of each start-up stage of `diagnose --json`, in order (each import
# stage counts only what the stages before it did not load)
PHASES = """
import json, sys, time
marks = [("start", time.perf_counter())]
def mark(name): marks.append((name, time.perf_counter()))
import click; mark("import click")
import regex; mark("import regex")
import app.core.types; mark("contract types (dataclasses)")
import app.core.rules, app.cli; mark("rules + cli modules")
from app.core.pipeline import Pipeline; mark("core modules")
p = Pipeline(); mark("rules from the warm cache")
p.ruleset.matchers(); mark("RE2 rule matchers")
log = p.compress(sys.argv[1]); mark("compress the line")
d = p.diagnose_compressed(log).diagnosis
json.dumps(d.to_json_dict(), indent=2, ensure_ascii=False); mark("diagnose + JSON")
assert "pydantic" not in sys.modules, "the warm-cache path imported pydantic"
print(json.dumps([(n, b - a) for (_, a), (n, b) in zip(marks, marks[1:])]))
"""


def phases(runs: int, env: dict[str, str], log: Path) -> None:
    samples: dict[str, list[float]] = {}
    for _ in range(runs):
        out = subprocess.run([sys.executable, "-c", PHASES, str(log)], env=env, cwd=REPO, capture_output=True,
                             text=True, check=True)
        for name, seconds in json.loads(out.stdout):
            samples.setdefault(name, []).append(seconds)
    print("| stage | median (ms) |\n|---|---|")
    for name, xs in samples.items():
        print(f"| {name} | {statistics.median(xs) * 1000:.0f} |")
    print(f"| total in-process | {sum(statistics.median(xs) for xs in samples.values()) * 1000:.0f} |")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("-n", "--runs", type=int, default=10, help="timed runs per command")
    ap.add_argument("--module", action="store_true", help="run `python -m app.cli` instead of the entry point")
    ap.add_argument("--json", dest="json_path", help="write the results as JSON here")
    ap.add_argument("--phases", action="store_true", help="time each start-up stage in-process instead")
    args = ap.parse_args()
    # an installed package has its bytecode; where PYTHONDONTWRITEBYTECODE is set (this VM's
    # environment) every start would compile the edited modules again
    compileall.compile_dir(REPO / "app", quiet=1)

    with tempfile.TemporaryDirectory(prefix="logdx-startup-") as tmp:
        log = Path(tmp) / "one.log"
        log.write_text("hello world\n")
        digits = Path(tmp) / "digits.log"
        digits.write_text(DIGITS_LINE)
        env = {**os.environ, "PYTHONPATH": str(REPO), "LOGDX_RULES_CACHE_DIR": str(Path(tmp) / "rules-cache"),
               "LOGDX_LLM_BACKEND": "none"}
        prefix = [sys.executable, "-m", "app.cli"] if args.module else [sys.executable, "-c", ENTRY]
        if args.phases:
            run_once(prefix + ["compress", str(log)], env)  # warms the rules cache
            print(f"load average {os.getloadavg()[0]:.2f}\n")
            phases(args.runs, env, log)
            return
        python_only = [run_once([sys.executable, "-c", "pass"], env) for _ in range(3)]
        load_before = os.getloadavg()
        results: dict[str, dict] = {}
        for name, template in COMMANDS.items():
            argv = prefix + [a.format(log=log, digits=digits) for a in template]
            if not results:
                cold = run_once(argv, env)  # writes the rules cache
                results["cold cache: " + name] = {"wall_median_s": cold[0], "wall_min_s": cold[0],
                                                  "cpu_median_s": cold[1], "runs": 1}
            else:
                run_once(argv, env)  # page cache, .pyc files
            runs = [run_once(argv, env) for _ in range(args.runs)]
            walls, cpus = [w for w, _ in runs], [c for _, c in runs]
            results[name] = {"wall_median_s": statistics.median(walls), "wall_min_s": min(walls),
                             "cpu_median_s": statistics.median(cpus), "runs": len(runs)}
        load_after = os.getloadavg()

    print(f"`{'python -m app.cli' if args.module else 'app.cli:main'}` on a one-line log, {os.cpu_count()} CPUs, "
          f"load average {load_before[0]:.2f} before, {load_after[0]:.2f} after; "
          f"bare `python -c pass`: {min(w for w, _ in python_only):.3f} s\n")
    print("| command | runs | wall median (s) | wall min (s) | CPU median (s) |")
    print("|---|---|---|---|---|")
    for name, r in results.items():
        print(f"| {name} | {r['runs']} | {r['wall_median_s']:.3f} | {r['wall_min_s']:.3f} | {r['cpu_median_s']:.3f} |")
    if args.json_path:
        Path(args.json_path).write_text(json.dumps({"load_before": load_before, "load_after": load_after,
                                                    "results": results}, indent=2))


if __name__ == "__main__":
    main()

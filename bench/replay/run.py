"""Replay a year of a real cluster's node faults through the restart controller's planning code.

    python bench/replay/run.py                        # the table of bench/README.md
    python bench/replay/run.py --gpus 1024 --ckpt-min 30 --breaker 0.05,0.25 --offender 2,3,5

For each job size and checkpoint interval: logdx (the controller's policy, budgets, repeat
offenders and breaker; probe and scheduler simulated) against plain requeue and no automation.
The assumptions (bench/replay/sim.py `Assumptions`) are printed with the table.
"""

from __future__ import annotations

import argparse
import sys
import time
from dataclasses import asdict, fields
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from app.controller.recovery import RecoveryRules, load_recovery_rules  # noqa: E402
from bench.replay.sim import Assumptions, Stats, load_trace, simulate  # noqa: E402

MODES = ("logdx", "requeue", "manual")


def with_knobs(rules: RecoveryRules, *, breaker: float | None = None, offender: int | None = None,
               same_limit: int | None = None) -> RecoveryRules:
    d = rules.defaults
    if same_limit is not None:
        d = d.model_copy(update={"same_failure_limit": same_limit})
    if breaker is not None:
        d = d.model_copy(update={"breaker": d.breaker.model_copy(update={"max_drain_share": breaker})})
    if offender is not None:
        d = d.model_copy(update={"repeat_offender": d.repeat_offender.model_copy(update={"failures": offender})})
    return rules.model_copy(update={"defaults": d})


def row(label: str, mode: str, s: Stats) -> str:
    return (f"| {label} ({s.jobs} jobs) | {mode} | {s.ettr:.4f} | {s.lost_gpu_h:,.0f} | {s.failures} | {s.restarts} | "
            f"{s.escalations} | {s.drains_right} | {s.drains_wrong} | {s.breaker_refusals} | "
            f"{s.steps_lost_h / max(1, s.failures) * 60:.0f} |")


HEADER = ("| job, ckpt | handled by | ETTR | lost GPU-h | failures | restarts | to a person | "
          "drains right | drains wrong | breaker refusals | work lost per failure (min) |\n"
          "|---|---|---|---|---|---|---|---|---|---|---|")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--gpus", default="256,1024,4096", help="job sizes in GPUs (8 per node)")
    ap.add_argument("--ckpt-min", default="30,120", help="checkpoint intervals in minutes")
    ap.add_argument("--breaker", default="", help="breaker shares to sweep (logdx only), e.g. 0.01,0.05,0.25")
    ap.add_argument("--offender", default="", help="repeat-offender thresholds to sweep (logdx only), e.g. 2,3,5")
    ap.add_argument("--same-limit", default="", help="same-failure limits to sweep (logdx only), e.g. 2,3,5")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--why", action="store_true", help="say why logdx handed failures to a person")
    ap.add_argument("--trace", type=Path, default=None)
    for f in fields(Assumptions):
        if f.name != "ckpt_h":
            ap.add_argument(f"--{f.name.replace('_', '-')}", type=float, default=f.default)
    args = ap.parse_args(argv)
    t0 = time.monotonic()
    base = {f.name: getattr(args, f.name) for f in fields(Assumptions) if f.name != "ckpt_h"}
    faults, horizon = load_trace(*(args.trace,) if args.trace else (), unknown_detect=base["unknown_detect"])
    rules = load_recovery_rules()
    fatal = sum(f.kind.fatal for f in faults)
    print(f"trace: {len(faults)} fault episodes ({fatal} stop a job) over {horizon / 24:.0f} days; "
          f"assumptions: {base}\n")
    print(HEADER)
    for gpus in (int(g) for g in args.gpus.split(",")):
        for ckpt in (float(c) for c in args.ckpt_min.split(",")):
            a = Assumptions(ckpt_h=ckpt / 60, **base)
            for mode in MODES:
                s = simulate(mode, faults, horizon, job_gpus=gpus, rules=rules, a=a, seed=args.seed)
                print(row(f"{gpus} GPUs, {ckpt:.0f} min", mode, s))
                if mode == "logdx" and args.why:
                    print(f"|   to a person: {dict(s.why_person)} |")
    sweeps = [("breaker", float(b), {"breaker": float(b)}) for b in args.breaker.split(",") if b] + \
             [("offender", int(o), {"offender": int(o)}) for o in args.offender.split(",") if o] + \
             [("same-failure limit", int(o), {"same_limit": int(o)}) for o in args.same_limit.split(",") if o]
    if sweeps:
        gpus, ckpt = int(args.gpus.split(",")[0]), float(args.ckpt_min.split(",")[0])
        print(f"\nlogdx, {gpus} GPUs, checkpoint every {ckpt:.0f} min, one knob changed:\n")
        print(HEADER)
        for name, value, knobs in sweeps:
            s = simulate("logdx", faults, horizon, job_gpus=gpus, rules=with_knobs(rules, **knobs),
                         a=Assumptions(ckpt_h=ckpt / 60, **base), seed=args.seed)
            print(row(f"{name} = {value}", "logdx", s))
    print(f"\n({time.monotonic() - t0:.1f} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Fault-injection campaign on a real training job, recovered by logdx as deployed.

    python bench/chaos/run.py --faults 30 --seed 1 [--human-delay 30] [--json out.json]

Starts the local Slurm cluster (.ci/slurm.sh; root, Debian), `logdx serve` with the Slurm
scheduler, live watch and controller enabled, the epilog hook, a local object store and a tmpfs
checkpoint directory (bench/chaos/deploy.py); submits the training job (bench/chaos/train.py, 2
ranks on 2 of 4 Slurm nodes); injects `--faults` faults (bench/chaos/faults.py: families in a
seeded random order, each after a random 2-8 s of training) and measures how logdx recovers each.
A person (this script) answers each escalation after `--human-delay` seconds: fixes what the fault
left (frees the disk, fixes the code) and requeues the job; drained nodes are "repaired" (resumed)
once the job runs again.

The two baselines are computed by replaying the same fault schedule with the costs measured in
this run (restart time, time to fail, steps lost), not by running them: "restart on any failure"
(plain requeue: every failure restarts at once from the newest checkpoint, nothing drained, a hang
is not noticed until the person looks) and "no automation" (the person restarts every failure,
right, `--human-delay` seconds after it stops the job or, for a hang, after it starts).
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from bench.chaos.campaign import Campaign, Result  # noqa: E402
from bench.chaos.deploy import Deployment  # noqa: E402
from bench.chaos.faults import FAMILIES  # noqa: E402

STEP_S = 0.15


def schedule(n: int, seed: int, families: list[str]) -> list[tuple[str, float]]:
    """Every family in turn, each round shuffled: n faults, random lead times."""
    rng = random.Random(seed)
    out: list[str] = []
    while len(out) < n:
        rnd = list(families)
        rng.shuffle(rnd)
        out += rnd
    return [(f, round(rng.uniform(2, 8), 1)) for f in out[:n]]


def uptimes(results: list[Result], t_start: float) -> list[float]:
    """Training time before each fault: from the first step (or training running again after the
    previous fault) to the injection, as measured."""
    out, prev = [], t_start
    for r in results:
        out.append(max(0.0, r.t_inject - prev))
        prev = r.t_inject + (r.running_s or 0.0)
    return out


def baselines(results: list[Result], leads: list[float], human_s: float, seed: int) -> dict:
    """Replays the schedule for plain requeue and no automation with the run's measured costs;
    `leads`: the measured training time before each fault (the same for all three)."""
    rng = random.Random(seed + 7)
    auto = [r for r in results if r.recovered and not r.escalated and r.detected_s is not None and r.running_s]
    fail_s = statistics.median([r.detected_s for r in auto if r.family not in ("hang",)] or [5.0])
    restart_s = statistics.median([r.running_s - r.detected_s for r in auto
                                   if r.family in ("store_drop", "nan", "collective", "hang")] or [15.0])
    lost = {r.n: (r.steps_lost or 0) for r in results}
    # a failing restart: starts, runs until the fault hits again (the next save, the bad batch)
    refail_s = restart_s + 3.0
    out = {}
    for name in ("plain_requeue", "no_automation"):
        wall = productive = 0.0
        restarts = escalations = harmful = 0
        for r, lead in zip(results, leads):
            productive += lead
            rec = lost[r.n] * STEP_S
            fam = r.family
            if name == "no_automation":
                stop = human_s if fam == "hang" else fail_s + human_s
                down = stop + restart_s
                restarts += 1
                escalations += 1
            elif fam == "hang":
                down = human_s + restart_s  # nobody notices a hang until the person does
                restarts += 1
                escalations += 1
            elif fam in ("disk_full", "key_error", "nan"):
                # fails again at every restart until the person fixes it
                loops = int(human_s // refail_s)
                down = fail_s + human_s + restart_s
                restarts += loops + 1
                escalations += 1
                harmful += 1 if loops > 3 else 0
            elif fam == "bad_node":
                # Slurm does not know the node is bad: each restart lands on it with p = 1/2
                n = 0
                while rng.random() < 0.5 and n < 20:
                    n += 1
                down = fail_s + restart_s + n * refail_s
                restarts += n + 1
            elif fam == "collective":
                down = 10.0 + restart_s  # gloo's timeout, then the restart
                restarts += 1
            else:
                down = fail_s + restart_s
                restarts += 1
            wall += lead + down + rec
        out[name] = {"ettr": productive / wall if wall else 0.0, "restarts": restarts, "escalations": escalations,
                     "harmful": harmful, "wall_s": wall}
    # logdx itself, on the same model (the lead, its measured downtime and lost steps)
    wall = sum(lead + (r.running_s or 0) + lost[r.n] * STEP_S for r, lead in zip(results, leads))
    out["logdx_model"] = {"ettr": sum(leads) / wall if wall else 0.0, "wall_s": wall}
    out["measured_costs"] = {"fail_s": fail_s, "restart_s": restart_s, "refail_s": refail_s, "human_s": human_s}
    return out


def table(results: list[Result]) -> str:
    head = ("#", "family", "detect s", "by", "diagnosis", "action", "right", "drained", "drain ok",
            "running s", "lost", "person")
    rows = [head]
    for r in results:
        rows.append((str(r.n), r.family, f"{r.detected_s:.1f}" if r.detected_s is not None else "-", r.detected_by or "-",
                     r.error_type or "-", r.action or "-", "yes" if r.right_action else "NO",
                     ",".join(r.drained) + (f" (breaker: {','.join(r.refused)})" if r.refused else "") or "-",
                     "yes" if r.drain_right else ("excl." if r.isolated else "NO"),
                     f"{r.running_s:.1f}" if r.running_s is not None else "-",
                     str(r.steps_lost) if r.steps_lost is not None else "-", "yes" if r.escalated or r.human else "-"))
    widths = [max(len(row[i]) for row in rows) for i in range(len(head))]
    lines = [" | ".join(c.ljust(w) for c, w in zip(row, widths)) for row in rows]
    lines.insert(1, "-+-".join("-" * w for w in widths))
    return "\n".join(lines)


def summary(results: list[Result], t0: float, t1: float, first_step_t: float, steps_done: int, human_s: float,
            base: dict) -> dict:
    n = len(results)
    return {
        "faults": n,
        "detected": sum(r.detected_s is not None for r in results),
        "recovered": sum(r.recovered for r in results),
        "right_diagnosis_action": sum(r.right_action for r in results),
        "right_action_share": sum(r.right_action for r in results) / n if n else 0.0,
        "drains_right": sum(r.drain_right for r in results),
        "breaker_refused": sum(len(r.refused) for r in results),
        "bad_nodes_isolated": f"{sum(r.isolated for r in results if r.expect_drain)} of "
                              f"{sum(bool(r.expect_drain) for r in results)}",
        "healthy_nodes_drained": sum(len(r.wrong_drains) for r in results),
        "restarts": sum(r.restarts for r in results),
        "human_escalations": sum(r.escalated for r in results),
        "harmful_actions": [f"#{r.n} {h}" for r in results for h in r.harmful],
        "median_detect_s": statistics.median([r.detected_s for r in results if r.detected_s is not None] or [0]),
        "median_running_again_s": statistics.median([r.running_s for r in results if r.running_s] or [0]),
        "steps_lost": sum(r.steps_lost or 0 for r in results),
        # steps whose data a rollback skipped advance the counter without being trained
        "steps_skipped": (skipped := sum(r.skipped[1] - r.skipped[0] + 1 for r in results if r.skipped)),
        "ettr_measured": (steps_done - skipped) * STEP_S / (t1 - first_step_t) if t1 > first_step_t else 0.0,
        "wall_s": t1 - t0,
        "human_delay_s": human_s,
        "baselines": base,
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--faults", type=int, default=30)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--human-delay", type=float, default=20.0, help="seconds a person takes to act on an escalation")
    ap.add_argument("--families", default=",".join(FAMILIES))
    ap.add_argument("--work", type=Path, default=None, help="working directory (default: a new one under /tmp)")
    ap.add_argument("--json", type=Path, default=None, help="write the per-fault results and figures here")
    args = ap.parse_args(argv)
    families = [f for f in args.families.split(",") if f]
    unknown = set(families) - set(FAMILIES)
    if unknown:
        ap.error(f"unknown families {sorted(unknown)}; known: {', '.join(FAMILIES)}")
    work = args.work or Path(f"/tmp/logdx-chaos-{int(time.time())}")
    plan = schedule(args.faults, args.seed, families)
    t0 = time.time()
    dep = Deployment(work)
    dep.start()
    if not dep.tmpfs and "disk_full" in families:
        print("no tmpfs mount possible here: disk_full left out", file=sys.stderr)
        plan = [p for p in plan if p[0] != "disk_full"]
    rng = random.Random(args.seed)
    camp = Campaign(dep, human_delay_s=args.human_delay, log=lambda s: print(s, flush=True))
    try:
        camp.start_job()
        for i, (family, lead) in enumerate(plan, 1):
            camp.run_fault(i, family, rng, lead_s=lead)
        # steady state after the last recovery, then the end of the run
        camp.wait_steps(after=time.time(), n=10, timeout=30)
        t1 = time.time()
        steps = camp.tail.last()[2]
    finally:
        dep.scontrol("update", f"JobId={camp.ext}", "Comment=done") if camp.ext else None
        if camp.ext:
            import subprocess
            subprocess.run(["scancel", camp.ext], env=dep.env, capture_output=True)
        camp.inj.clear_all()
        dep.stop()
    results = camp.results
    base = baselines(results, uptimes(results, camp.t_start), args.human_delay, args.seed)
    figs = summary(results, t0, t1, camp.t_start, steps, args.human_delay, base)
    print()
    print(table(results))
    print()
    b = figs["baselines"]
    print(f"faults {figs['faults']}: detected {figs['detected']}, recovered {figs['recovered']}, right action "
          f"{figs['right_diagnosis_action']} ({figs['right_action_share']:.0%}), drains right {figs['drains_right']}, "
          f"healthy nodes drained {figs['healthy_nodes_drained']}, bad nodes drained or excluded "
          f"{figs['bad_nodes_isolated']} (breaker refusals {figs['breaker_refused']})")
    print(f"restarts {figs['restarts']}, human escalations {figs['human_escalations']}, harmful actions "
          f"{len(figs['harmful_actions'])} {figs['harmful_actions'] or ''}")
    print(f"median detection {figs['median_detect_s']:.1f} s, median time to training again "
          f"{figs['median_running_again_s']:.1f} s, steps lost {figs['steps_lost']}")
    print(f"ETTR  logdx measured {figs['ettr_measured']:.3f} | same schedule, modelled: logdx "
          f"{b['logdx_model']['ettr']:.3f}, restart on any failure {b['plain_requeue']['ettr']:.3f} "
          f"({b['plain_requeue']['restarts']} restarts, {b['plain_requeue']['harmful']} deterministic loops), "
          f"no automation {b['no_automation']['ettr']:.3f} ({b['no_automation']['escalations']} escalations)")
    print(f"human delay {args.human_delay:.0f} s; baselines replayed with measured costs {b['measured_costs']}; "
          f"wall {figs['wall_s']:.0f} s; work dir {work}")
    if args.json:
        args.json.write_text(json.dumps({"figures": figs, "faults": [r.to_dict() for r in results],
                                         "schedule": plan}, indent=1, default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main())

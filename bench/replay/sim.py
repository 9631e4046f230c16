"""The restart controller replayed over a real cluster's fault trace, by simulation.

A year of real node faults (`../shared/traces/infinitehbd/fault_trace.json`: start, end and type
of every fault on 400 GPU servers of an LLM-pretraining cluster) arrives at training jobs that
fill the cluster. When a fault that stops a job hits one of its nodes, the job fails; what
happens next depends on who handles it:

- `logdx`: the controller's own planning code (`plan_recovery`: recovery policy, budgets,
  same-failure stop, repeat offenders; `breaker_allows`: the drain breaker), with the
  diagnosis, the probe and the scheduler simulated: the probe finds a faulty node of the job
  with the detection rate of its fault class, drained nodes leave the pool until their repair
  (the trace's fault end), a stopped recovery goes to a person;
- `requeue`: what Slurm's `--requeue` gives: every failure restarts the job on the same nodes
  (a node the scheduler itself saw go down excepted), however often it fails;
- `manual`: no automation: a person notices after `human_delay_h`, finds the faulty nodes,
  drains them and restarts the job.

Everything not measured here is an assumption with a flag (bench/replay/run.py), stated in the
table's header. Pure: no I/O beyond reading the trace.
"""

from __future__ import annotations

import heapq
import json
import math
import random
from collections import defaultdict
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime, timedelta
from pathlib import Path

from app.controller.recovery import (
    Facts, JobEnd, PriorAttempt, RecoveryAction, RecoveryRules, StepKind, breaker_allows, plan_recovery,
)
from app.core.types import ErrorType, default_category

TRACE = Path(__file__).resolve().parent / "data" / "fault_trace.json"
TRACE_NODES = 400  # servers in the traced cluster (faults on 231 of them)
GPUS_PER_NODE = 8
EPOCH = datetime(2024, 3, 30, tzinfo=UTC)  # the trace's day 0


@dataclass(frozen=True)
class FaultClass:
    """How a traced fault shows itself to a training job and to logdx."""

    fatal: bool  # it stops a job running on the node (else it degrades it: not simulated)
    error_type: ErrorType  # what the diagnosis of the job's log reads
    named: bool  # the log names the host (dmesg Xid/ECC lines, the scheduler's node-failure notice)
    scheduler_sees: bool  # the scheduler marks the node down itself (never scheduled while broken)
    probe_detect: float  # chance the two-round allgather probe fails the node


def classify(level: str, cls: str, desc: str, *, unknown_detect: float) -> FaultClass:
    d = desc.lower()
    if cls == "GPU":
        if any(k in d for k in ("pci link width", "p2p bandwidth", "temperature", "sbe")):
            return FaultClass(False, ErrorType.CUDAError, True, False, 0.0)
        if "silent data corruption" in d:  # wrong numbers, no crash: a loss spike at best
            return FaultClass(False, ErrorType.LossSpike, False, False, 0.0)
        etype = ErrorType.ECCError if "ecc" in d else ErrorType.CUDAError
        return FaultClass(True, etype, True, False, 1.0)
    if cls in ("Parameter Plane Cable", "NIC"):
        if "speed low" in d or "width low" in d:
            return FaultClass(False, ErrorType.NetworkError, False, False, 0.0)
        return FaultClass(True, ErrorType.NCCLRemoteError, False, False, 1.0)
    if cls in ("Power Supply", "Motherboard", "CPU", "Riser Card", "Operating System") \
            or "server down" in d or "offline" in d:
        if "redundancy lost" in d or "configuration" in d:
            return FaultClass(False, ErrorType.NodeFailure, True, False, 0.0)
        return FaultClass(True, ErrorType.NodeFailure, True, True, 0.0)
    if cls == "File System":
        return FaultClass(True, ErrorType.StorageError, False, False, 0.0)
    if level == "Other Failure" and cls == "Unknown Error" or cls == "Other Failures":
        # a node that fails for no recorded reason: its peers see a collective time out
        return FaultClass(True, ErrorType.NCCLTimeoutError, False, False, unknown_detect)
    return FaultClass(False, ErrorType.Unknown, False, False, 0.0)  # fans, battery, RAID, firmware, tests


@dataclass(frozen=True)
class Fault:
    node: int
    start_h: float
    end_h: float
    kind: FaultClass
    desc: str


def load_trace(path: Path = TRACE, *, unknown_detect: float = 0.5) -> tuple[list[Fault], float]:
    events = json.loads(Path(path).read_text())
    ids: dict[str, int] = {}
    open_: dict[str, tuple[float, dict]] = {}
    faults: list[Fault] = []
    for ev in sorted(events, key=lambda e: e["event_time"]):
        node = ids.setdefault(ev["node_id"], len(ids))
        ft = ev["fault_type"]
        if ev["event_type"] == "fault_start":
            open_[ev["node_id"]] = (ev["event_time"] * 24, ft)
        elif ev["node_id"] in open_:
            start, ft0 = open_.pop(ev["node_id"])
            kind = classify(ft0["Level"], ft0["Class"], ft0["Desc"], unknown_detect=unknown_detect)
            faults.append(Fault(node, start, ev["event_time"] * 24, kind, f'{ft0["Class"]}: {ft0["Desc"]}'))
    horizon = max(e["event_time"] for e in events) * 24
    return faults, horizon


def tile(faults: list[Fault], horizon_h: float, copies: int) -> list[Fault]:
    """A cluster `copies` times the traced one: copy k is the trace shifted by k/copies of its
    length (cyclic), so the copies' faults do not arrive together."""
    out = []
    for k in range(copies):
        shift = horizon_h * k / copies
        for f in faults:
            s, e = (f.start_h + shift) % horizon_h, (f.end_h + shift) % horizon_h
            if e < s:  # wrapped around the end: keep the part inside the horizon
                e = horizon_h
            out.append(replace(f, node=f.node + k * TRACE_NODES, start_h=s, end_h=e))
    return out


@dataclass
class Assumptions:
    ckpt_h: float = 1.0  # checkpoint interval
    startup_h: float = 10 / 60  # requeue + start + load the checkpoint
    crash_h: float = 5 / 60  # a start on a broken node fails this long after it began
    detect_h: float = 1 / 60  # epilog upload + diagnosis
    probe_h: float = 20 / 3600  # two probe rounds with one faulty node (bench/README: 2 x 5 s + start)
    human_delay_h: float = 2.0  # a person notices, finds the node, drains it, restarts
    misdiagnosis: float = 0.10  # a failure read as the job's own error (no restart: a person looks)
    probe_false_positive: float = 0.0  # per probed healthy node (0 in 50 x 8 fault-free runs)
    wrong_drain_back_h: float = 24.0  # a healthy node drained by mistake comes back after this
    unknown_detect: float = 0.5  # probe detection of the trace's "Unknown Error" faults
    wrong_host: float = 0.1  # the log names a healthy host of the job instead of the broken one


@dataclass
class Stats:
    gpus: int = 0
    jobs: int = 0
    wall_h: float = 0.0
    productive_h: float = 0.0
    failures: int = 0
    restarts: int = 0
    escalations: int = 0
    drains_right: int = 0
    drains_wrong: int = 0
    breaker_refusals: int = 0
    steps_lost_h: float = 0.0
    waiting_h: float = 0.0  # a job waiting for enough usable nodes
    why_person: dict[str, int] = field(default_factory=lambda: defaultdict(int))  # escalation reasons

    @property
    def ettr(self) -> float:
        return self.productive_h / self.wall_h if self.wall_h else 0.0

    @property
    def lost_gpu_h(self) -> float:
        """GPU-hours of all the jobs not spent on training that was kept."""
        return (self.wall_h - self.productive_h) * self.gpus / max(1, self.jobs)


@dataclass
class _Job:
    jid: int
    nodes: list[int]
    start_h: float = 0.0  # when the running attempt began training
    running: bool = False
    saved_h: float = 0.0  # training kept in checkpoints
    history: list[PriorAttempt] = field(default_factory=list)
    attempt: int = 0


class Cluster:
    """Nodes: which are broken now (by the trace), drained, or seen down by the scheduler."""

    def __init__(self, n: int, faults: list[Fault]) -> None:
        self.n = n
        self.active: dict[int, list[Fault]] = defaultdict(list)
        self.drained: dict[int, float] = {}  # node -> drained at
        self.owner: dict[int, int] = {}  # node -> job id
        self.faults = faults

    def broken(self, node: int) -> Fault | None:
        live = [f for f in self.active.get(node, []) if f.kind.fatal]
        return live[0] if live else None

    def usable(self, node: int) -> bool:
        f = self.broken(node)
        return node not in self.drained and node not in self.owner and not (f and f.kind.scheduler_sees)


def _at(h: float) -> datetime:
    return EPOCH + timedelta(hours=h)


def simulate(mode: str, faults: list[Fault], horizon_h: float, *, job_gpus: int, rules: RecoveryRules,
             a: Assumptions, seed: int = 1) -> Stats:
    rng = random.Random(seed)
    job_nodes = max(1, job_gpus // GPUS_PER_NODE)
    copies = max(1, math.ceil(job_nodes / (0.8 * TRACE_NODES)))
    n = copies * TRACE_NODES
    faults = tile(faults, horizon_h, copies) if copies > 1 else faults
    cluster = Cluster(n, faults)
    n_jobs = max(1, int(0.8 * n) // job_nodes)
    jobs = [_Job(j, list(range(j * job_nodes, (j + 1) * job_nodes))) for j in range(n_jobs)]
    for job in jobs:
        for node in job.nodes:
            cluster.owner[node] = job.jid
    stats = Stats(gpus=job_gpus * n_jobs, jobs=n_jobs, wall_h=horizon_h * n_jobs)
    incidents: list[tuple[float, int]] = []  # (time, host) of infrastructure failures naming a host
    drain_log: list[tuple[float, int]] = []  # (time, host) drained by the controller
    queue: list[tuple[float, int, str, int, int]] = []  # (time, seq, kind, a, b)
    seq = iter(range(1 << 62))

    def push(t: float, kind: str, x: int, y: int = 0) -> None:
        heapq.heappush(queue, (t, next(seq), kind, x, y))

    for i, f in enumerate(faults):
        push(f.start_h, "fault", i)
    for job in jobs:
        push(0.0, "start", job.jid, job.attempt)

    def drain(node: int, t: float) -> None:
        if node in cluster.drained:
            return
        cluster.drained[node] = t
        if cluster.broken(node):
            stats.drains_right += 1
        else:
            stats.drains_wrong += 1
            push(t + a.wrong_drain_back_h, "undrain", node)

    def replace_nodes(job: _Job, out: set[int]) -> bool:
        keep = [x for x in job.nodes if x not in out]
        for x in job.nodes:
            if x in out:
                cluster.owner.pop(x, None)
        need = job_nodes - len(keep)
        spare = [x for x in range(n) if cluster.usable(x)][:need] if need else []
        for x in spare:
            cluster.owner[x] = job.jid
        job.nodes = keep + spare
        return len(job.nodes) == job_nodes

    def restart(job: _Job, t: float, exclude: set[int]) -> None:
        job.running = False
        # a node the scheduler sees down is never given to a job again before its repair
        down = {x for x in job.nodes if (f := cluster.broken(x)) and f.kind.scheduler_sees}
        if not replace_nodes(job, exclude | down | {x for x in job.nodes if x in cluster.drained}):
            push(t + 1.0, "wait", job.jid, job.attempt)  # too few usable nodes: try again in an hour
            stats.waiting_h += 1.0
            return
        stats.restarts += 1
        job.attempt += 1
        push(t + a.startup_h, "start", job.jid, job.attempt)

    def fail(job: _Job, t: float, culprit: int | None) -> None:
        ran = max(0.0, t - job.start_h) if job.running else 0.0
        kept = math.floor(ran / a.ckpt_h) * a.ckpt_h if job.running else 0.0
        stats.productive_h += kept
        stats.steps_lost_h += ran - kept
        job.saved_h += kept
        reached = job.saved_h + (ran - kept)
        job.running = False
        job.attempt += 1  # any pending event of the attempt is void
        stats.failures += 1
        fault = cluster.broken(culprit) if culprit is not None else None
        if mode == "requeue":
            push(t + a.detect_h, "restart", job.jid, job.attempt)
            return
        if mode == "manual" or fault is None:
            push(t + a.human_delay_h, "human", job.jid, job.attempt)
            stats.escalations += 1
            stats.why_person["no automation" if mode == "manual" else "no broken node"] += 1
            return
        # logdx: diagnose, plan with the controller's own code, probe, drain, requeue
        kind = fault.kind
        etype = kind.error_type if rng.random() >= a.misdiagnosis else ErrorType.KeyError
        named = culprit
        if kind.named and rng.random() < a.wrong_host:
            named = rng.choice([x for x in job.nodes if x != culprit] or [culprit])
        suspects = (f"n{named}",) if kind.named else ()
        facts = Facts(error_type=etype, category=default_category(etype), fingerprint=f"{etype.value}:{suspects}",
                      suspect_hosts=suspects, job_hosts=tuple(f"n{x}" for x in job.nodes),
                      last_step=int(reached * 60), end=JobEnd(state="failed", exit_code="1:0"))
        window = rules.defaults.repeat_offender.window_s / 3600
        counts: dict[str, int] = defaultdict(int)
        for at, host in incidents:
            if t - window <= at < t:
                counts[f"n{host}"] += 1
        plan = plan_recovery(facts, job.history, dict(counts), rules, now=_at(t))
        if kind.named and facts.category.value == "infrastructure":
            incidents.append((t, named))
        job.history.append(PriorAttempt(fingerprint=facts.fingerprint, action=plan.action,
                                        last_step=facts.last_step, at=_at(t)))
        t_next = t + a.detect_h
        if not plan.restart:
            stats.escalations += 1
            stats.why_person[plan.stopped.split(" (")[0].split(":")[0] if plan.stopped else plan.policy_id] += 1
            push(t_next + a.human_delay_h, "human", job.jid, job.attempt)
            return
        exclude: set[int] = set()
        probe_found: list[int] = []
        bw = rules.defaults.breaker.window_s / 3600
        for step in plan.steps:
            if step.kind is StepKind.PROBE:
                t_next += a.probe_h
                probe_found = [x for x in job.nodes
                               if (f := cluster.broken(x)) and rng.random() < f.kind.probe_detect]
                probe_found += [x for x in job.nodes
                                if not cluster.broken(x) and rng.random() < a.probe_false_positive]
            elif step.kind is StepKind.DRAIN:
                hosts = [int(h[1:]) for h in step.hosts] if step.hosts else probe_found
                for x in sorted(hosts, key=lambda h: h != named):  # the host the log names first
                    exclude.add(x)
                    recent = {h for at, h in drain_log if t - bw <= at <= t}
                    ok, _ = breaker_allows(rules.defaults.breaker, drained={f"n{h}" for h in recent},
                                           host=f"n{x}", total_nodes=n)
                    if not ok:
                        stats.breaker_refusals += 1
                        continue
                    drain(x, t)
                    drain_log.append((t, x))
            elif step.kind is StepKind.REQUEUE:
                t_next += plan.delay_s / 3600
        restart(job, t_next, exclude)

    while queue:
        t, _, kind, x, y = heapq.heappop(queue)
        if t > horizon_h:
            break
        if kind == "fault":
            f = faults[x]
            cluster.active[f.node].append(f)
            push(f.end_h, "repair", f.node, x)
            if f.kind.fatal and f.node in cluster.owner:
                job = jobs[cluster.owner[f.node]]
                if job.running:
                    fail(job, t, f.node)
        elif kind == "repair":
            f = faults[y]
            cluster.active[x] = [g for g in cluster.active[x] if g is not f]
            if not cluster.broken(x) and x in cluster.drained:
                del cluster.drained[x]  # repaired and resumed (the resume API clears its incidents)
                incidents[:] = [(at, h) for at, h in incidents if h != x]
        elif kind == "undrain":
            cluster.drained.pop(x, None)
        else:  # an event of one attempt of a job: void once the job moved on
            job = jobs[x]
            if y != job.attempt:
                continue
            if kind == "start":
                job.running, job.start_h = True, t
                if any(cluster.broken(n_) for n_ in job.nodes):
                    push(t + a.crash_h, "crash", job.jid, job.attempt)
            elif kind == "crash":
                fail(job, t, next((n_ for n_ in job.nodes if cluster.broken(n_)), None))
            elif kind == "human":  # a person drains the job's broken nodes and restarts it
                broken = {n_ for n_ in job.nodes if cluster.broken(n_)}
                for n_ in broken:
                    drain(n_, t)
                job.history.clear()
                restart(job, t, broken)
            else:  # "restart" (plain requeue: same nodes but those the scheduler saw down), "wait"
                restart(job, t, set())
    for job in jobs:
        if job.running:
            stats.productive_h += max(0.0, horizon_h - job.start_h)
    return stats

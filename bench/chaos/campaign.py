"""One fault campaign on the deployed stack: inject, watch logdx recover (or play the person it
escalates to), measure. Used by bench/chaos/run.py and tests/controller/test_chaos.py."""

from __future__ import annotations

import re
import threading
import time
from dataclasses import asdict, dataclass, field
from datetime import datetime
from pathlib import Path

from bench.chaos.deploy import CLUSTER, Deployment
from bench.chaos.faults import DETERMINISTIC, RIGHT_ACTIONS, TRANSIENT, Fault, Injector

ITER_RX = re.compile(r"^ iteration\s+(\d+)/")
ATTEMPT_RX = re.compile(r"^chaos job \d+ attempt (\d+)")
STABLE_STEPS = 15     # a restart counts once this many new steps ran
FAULT_TIMEOUT_S = 150  # past this without a running job, the person steps in (not recovered)


class Tail(threading.Thread):
    """Follows the job's log file; timestamps each iteration line as it appears."""

    def __init__(self, path: Path) -> None:
        super().__init__(daemon=True)
        self.path, self.stop = path, False
        self.attempt = 0
        self.steps: list[tuple[float, int, int]] = []  # (time, attempt, step)
        self.lines: list[str] = []
        self.lock = threading.Lock()

    def run(self) -> None:
        pos, partial = 0, b""
        while not self.stop:
            try:
                with self.path.open("rb") as f:
                    if f.seek(0, 2) < pos:  # Slurm truncates the output file when it requeues the job
                        pos, partial = 0, b""
                    f.seek(pos)
                    data = f.read()
            except FileNotFoundError:
                data = b""
            now = time.time()
            if data:
                pos += len(data)
                parts = (partial + data).split(b"\n")
                partial = parts.pop()
                with self.lock:
                    for raw in parts:
                        line = raw.decode("utf-8", "replace")
                        self.lines.append(line)
                        if m := ATTEMPT_RX.match(line):
                            self.attempt = int(m.group(1))
                        elif m := ITER_RX.match(line):
                            self.steps.append((now, self.attempt, int(m.group(1))))
            time.sleep(0.1)

    def last(self) -> tuple[float, int, int] | None:
        with self.lock:
            return self.steps[-1] if self.steps else None

    def since(self, t: float) -> list[tuple[float, int, int]]:
        with self.lock:
            return [s for s in self.steps if s[0] >= t]


@dataclass
class Result:
    n: int
    family: str
    detail: str
    t_inject: float
    step: int | None
    node: str | None
    expect_drain: list[str]
    detected_s: float | None = None
    detected_by: str = ""
    error_type: str = ""
    action: str = ""
    runs: int = 0
    restarts: int = 0                 # automatic restarts for this fault
    drained: list[str] = field(default_factory=list)
    refused: list[str] = field(default_factory=list)   # drains the breaker refused
    excluded: list[str] = field(default_factory=list)  # nodes the restart left out
    escalated: bool = False
    human: list[str] = field(default_factory=list)
    recovered: bool = False
    running_s: float | None = None     # fault -> training running again (the attempt that lasted)
    resumed_from: int | None = None
    last_step: int | None = None       # last step done before the job died
    steps_lost: int | None = None
    skipped: list[int] | None = None
    notes: list[str] = field(default_factory=list)

    @property
    def right_action(self) -> bool:
        return self.action in RIGHT_ACTIONS[self.family]

    @property
    def drain_right(self) -> bool:
        return set(self.drained) == set(self.expect_drain)

    @property
    def isolated(self) -> bool:
        """The bad node is out of the restart: drained, or refused by the breaker and excluded."""
        return set(self.expect_drain) <= set(self.drained) | (set(self.refused) & set(self.excluded))

    @property
    def wrong_drains(self) -> list[str]:
        return sorted(set(self.drained) - set(self.expect_drain))

    @property
    def harmful(self) -> list[str]:
        out = [f"drained healthy {n}" for n in self.wrong_drains]
        # the same failure 3 times without progress stops the restarts (rules/recovery.yaml
        # same_failure_limit): 2 restarts of a deterministic failure are within its budget
        if self.family in DETERMINISTIC and self.restarts > 2:
            out.append(f"deterministic failure restarted {self.restarts} times")
        if self.family in TRANSIENT and self.escalated:
            out.append("transient failure stopped")
        return out

    def to_dict(self) -> dict:
        d = asdict(self)
        d.update(right_action=self.right_action, drain_right=self.drain_right, isolated=self.isolated,
                 harmful=self.harmful)
        return d


def _ts(value: str) -> float:
    return datetime.fromisoformat(value.replace("Z", "+00:00")).timestamp()


class Campaign:
    def __init__(self, dep: Deployment, *, human_delay_s: float, log=print) -> None:  # noqa: ANN001
        self.dep, self.human_delay_s, self.log = dep, human_delay_s, log
        self.inj = Injector(dep.chaos_dir, dep.ckpt)
        self.ext = ""
        self.tail: Tail | None = None
        self.job_id: int | None = None
        self.results: list[Result] = []
        self.t_start = 0.0
        self.seen_runs: set[int] = set()

    # -- job ---------------------------------------------------------------------------------
    def start_job(self, iters: int = 1_000_000) -> None:
        self.ext = self.dep.submit(iters=iters)
        self.tail = Tail(self.dep.work / f"job-{self.ext}.log")
        self.tail.start()
        self.wait_steps(after=0.0, n=STABLE_STEPS, timeout=180)
        self.t_start = self.tail.steps[0][0]

    def logdx_job(self) -> int:
        if self.job_id is None:
            page = self.dep.api("GET", f"/v1/jobs?cluster={CLUSTER}&limit=200", admin=True)
            self.job_id = next(j["id"] for j in page["items"] if j["external_id"] == self.ext)
        return self.job_id

    def restarts(self) -> int:
        return int(self.dep.job(self.ext).get("Restarts", 0))

    def state(self) -> str:
        return self.dep.job(self.ext).get("JobState", "UNKNOWN")

    def wait_steps(self, *, after: float, n: int, timeout: float, attempt: int | None = None) -> bool:
        deadline = time.time() + timeout
        while True:
            steps = [s for s in self.tail.since(after) if attempt is None or s[1] == attempt]
            if len(steps) >= n:
                return True
            if time.time() >= deadline:
                return False
            time.sleep(0.3)

    # -- one fault ---------------------------------------------------------------------------
    def run_fault(self, n: int, family: str, rng, *, lead_s: float) -> Result:  # noqa: ANN001
        # let training run a while since the last recovery (random lead: faults land at any point
        # of the checkpoint interval)
        t0 = time.time()
        self.wait_steps(after=t0, n=max(1, int(lead_s / 0.15)), timeout=lead_s * 4 + 30)
        last = self.tail.last()
        attempt0 = self.tail.attempt
        fault = self.inj.inject(family, ext=self.ext, restarts=self.restarts(), step=last[2] if last else None, rng=rng)
        r = Result(n=n, family=family, detail=fault.detail, t_inject=fault.t_inject, step=fault.step, node=fault.node,
                   expect_drain=sorted(fault.expect_drain))
        self.log(f"[{n:2d}] {family}: {fault.detail}")
        self._await(r, fault, attempt0)
        self.results.append(r)
        self.log(f"     -> {r.error_type or '?'} / {r.action or '?'}; drained {r.drained or '-'}; "
                 f"running again after {r.running_s if r.running_s is None else round(r.running_s, 1)} s; "
                 f"lost {r.steps_lost} steps{'; person: ' + ', '.join(r.human) if r.human else ''}"
                 f"{'; ' + '; '.join(r.notes) if r.notes else ''}")
        return r

    def _runs(self) -> list[dict]:
        items = self.dep.api("GET", f"/v1/jobs/{self.logdx_job()}/recoveries", admin=True)["items"]
        return sorted(items, key=lambda x: x["id"])

    def _await(self, r: Result, fault: Fault, attempt0: int) -> None:
        t_fail_deadline = time.time() + FAULT_TIMEOUT_S
        human_at: float | None = None
        while True:
            now = time.time()
            runs = [x for x in self._runs() if x["id"] not in self.seen_runs and _ts(x["created_at"]) >= r.t_inject - 1]
            for x in runs:
                if r.detected_s is None:
                    r.detected_s = _ts(x["created_at"]) - r.t_inject
                if x["status"] == "running":
                    continue  # its outcome is written when its steps are done
                self.seen_runs.add(x["id"])
                r.runs += 1
                if not r.detected_by:
                    r.detected_by = "live watch" if x["idempotency_key"].startswith("live:") else "epilog"
                    r.error_type, r.action = x["error_type"], x["action"]
                out = x.get("outcome") or {}
                r.drained += [h for h in out.get("drained", []) if h not in r.drained]
                r.refused += [h for h in out.get("breaker", []) if h not in r.refused]
                r.excluded += [h for h in (out.get("restart") or {}).get("exclude", []) if h not in r.excluded]
                if out.get("restart"):
                    r.restarts += 1
                    r.skipped = out["restart"].get("skip_batches")
                elif not (x.get("plan") or {}).get("restart") and x["action"] != "none":
                    # nothing restarts the job: the owner or an admin was told (a requeue skipped
                    # because the job was already restarted is not an escalation)
                    if human_at is None:
                        r.escalated = True
                        human_at = _ts(x["created_at"]) + self.human_delay_s
                        r.notes.append(f"{x['status']}: {x['reason'][:90]}")
            # the job runs again and has made progress: recovered
            if self.tail.attempt > attempt0 and self.wait_steps(after=r.t_inject, n=STABLE_STEPS, timeout=0,
                                                                attempt=self.tail.attempt):
                if not self._failing_soon():
                    break
            state = self.state()
            if human_at is not None and now >= human_at:
                self._person(r, fault)
                human_at = None
                t_fail_deadline = time.time() + FAULT_TIMEOUT_S
            if now > t_fail_deadline:
                r.notes.append(f"not recovered in {FAULT_TIMEOUT_S} s (job {state})")
                self._person(r, fault)
                t_fail_deadline = time.time() + FAULT_TIMEOUT_S
            time.sleep(0.5)
        att = self.tail.attempt
        steps = [s for s in self.tail.since(r.t_inject) if s[1] == att]
        r.recovered = not any("not recovered" in n for n in r.notes)
        r.running_s = steps[0][0] - r.t_inject
        before = [s for s in self.tail.steps if s[1] < att]
        r.last_step = max(s[2] for s in before) if before else None
        first_new = steps[0][2]
        skipped = r.skipped[1] - r.skipped[0] + 1 if r.skipped and r.skipped[0] <= first_new else 0
        resumed = first_new - 1 - (skipped if r.skipped and first_new > r.skipped[1] else 0)
        r.resumed_from = resumed
        r.steps_lost = (r.last_step - resumed) if r.last_step is not None else None
        # once the job runs again: the drained node is repaired, what the fault left is cleared
        self._repair_nodes(r, fault)

    def _failing_soon(self) -> bool:
        return self.state() not in ("RUNNING",)

    def _person(self, r: Result, fault: Fault) -> None:
        """The person an escalation reaches: fixes what the fault left behind, puts drained nodes
        back after repair, restarts the job (from the tracker's checkpoint: no restart spec)."""
        r.human += self.inj.repair(fault)
        for node in r.drained:
            self._resume(node)
        state = self.state()
        if state in ("FAILED", "COMPLETED", "CANCELLED", "NODE_FAIL", "TIMEOUT", "OUT_OF_MEMORY"):
            self.dep.scontrol("requeue", self.ext)
            time.sleep(1)
            self.dep.scontrol("update", f"JobId={self.ext}", "StartTime=now")
            r.human.append("requeued the job")

    def _repair_nodes(self, r: Result, fault: Fault) -> None:
        self.inj.repair(fault)
        for node in r.drained:
            self._resume(node)

    def _resume(self, node: str) -> None:
        try:
            self.dep.api("POST", f"/v1/controller/nodes/{node}/resume", {"cluster": CLUSTER, "reason": "repaired"},
                         admin=True)
        except Exception:  # noqa: BLE001 - already resumed
            self.dep.scontrol("update", f"NodeName={node}", "State=RESUME")
